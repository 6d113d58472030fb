"""Members of a department, managed by its admins (the API's rules: the last admin cannot leave)."""
from django import forms
from django.contrib.auth import get_user_model

from core.models import Membership


class MemberForm(forms.Form):
    username = forms.CharField(max_length=150, label="User name")
    role = forms.ChoiceField(choices=Membership.Role.choices, initial=Membership.Role.MEMBER)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, label_suffix="", **kwargs)

    def clean_username(self):
        name = self.cleaned_data["username"].strip()
        user = get_user_model().objects.filter(username=name).first()
        if user is None:
            raise forms.ValidationError(f"no user named {name!r}")
        self.cleaned_data["user"] = user
        return name


class WeightForm(forms.Form):
    """A department's fair-share weight, as its parent's admins set it in the quota tree."""

    weight = forms.DecimalField(min_value=0, max_digits=8, decimal_places=3,
                                widget=forms.NumberInput(attrs={"step": "0.5", "min": "0"}))


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Membership.Role.choices)
