"""The notification settings' forms; the rules are the services' (their errors go beside these fields)."""
from django import forms

from notifications.events import DEPARTMENT_EVENTS, USER_EVENTS


def _choices(events) -> list[tuple[str, str]]:
    return [(e.value, e.label.replace("N hours", "the hours below")) for e in events]


class _Form(forms.Form):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, label_suffix="", **kwargs)


class PreferenceForm(_Form):
    events = forms.MultipleChoiceField(choices=_choices(USER_EVENTS), required=False, label="Tell me when my job is",
                                       widget=forms.CheckboxSelectMultiple)
    waiting_hours = forms.IntegerField(label="“Still waiting” after (hours)", initial=6,
                                       widget=forms.NumberInput(attrs={"min": 1, "max": 720}))
    email = forms.BooleanField(required=False, label="By e-mail to my address")
    # a plain field: the service's check is the one rule, its message beside the field
    email_address = forms.CharField(required=False, label="My e-mail address",
                                    help_text="Also where your department subscriptions' e-mail goes. Empty: no e-mail.",
                                    widget=forms.EmailInput(attrs={"autocomplete": "email"}))
    webhook_url = forms.CharField(required=False, max_length=500, label="Webhook URL",
                                  help_text="http(s); receives a Slack-compatible JSON POST. Empty: no webhook.",
                                  widget=forms.TextInput(attrs={"inputmode": "url",
                                                                "placeholder": "https://hooks.example.com/…"}))


class SubscriptionForm(_Form):
    events = forms.MultipleChoiceField(choices=_choices(DEPARTMENT_EVENTS), required=False, label="Tell me about",
                                       widget=forms.CheckboxSelectMultiple)
    email = forms.BooleanField(required=False, label="By e-mail to my address")
    webhook_url = forms.CharField(required=False, max_length=500, label="Webhook URL",
                                  help_text="http(s); empty: no webhook.",
                                  widget=forms.TextInput(attrs={"inputmode": "url"}))
