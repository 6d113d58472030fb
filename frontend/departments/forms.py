"""Members of a department, managed by its admins (the API's rules: the last admin cannot leave); the quota tree's
places, weights and quotas, managed by the admins above (the API's rules)."""
from django import forms
from django.contrib.auth import get_user_model
from django.forms.utils import flatatt
from django.utils.html import escape
from django.utils.safestring import mark_safe

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
    """A department's fair-share weight and fence, as its parent's admins set them in the quota tree (the row's form
    shows both, so an unticked fence is a fence off)."""

    weight = forms.DecimalField(min_value=0, max_digits=8, decimal_places=3,
                                widget=forms.NumberInput(attrs={"step": "0.5", "min": "0"}))
    fence = forms.BooleanField(required=False)


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Membership.Role.choices)


ROOT = ""  # the parent choice that puts a department under the root (operators only)


class PlainSelect(forms.Widget):
    """A select of plain (value, label) options, written out directly: Django normalizes and renders choices one by
    one, and the quota tree's forms list every department four times (240 departments took 160 ms a page)."""

    def __init__(self, attrs=None):
        super().__init__(attrs)
        self.options: list[tuple[str, str]] = []

    def render(self, name, value, attrs=None, renderer=None):
        chosen = "" if value is None else str(value)
        options = "".join(f'<option value="{escape(v)}"{" selected" * (v == chosen)}>{escape(label)}</option>'
                          for v, label in self.options)
        return mark_safe(f'<select name="{escape(name)}"{flatatt(self.build_attrs(self.attrs, attrs))}>{options}'
                         f'</select>')


class NameChoiceField(forms.CharField):
    """One of many names (ChoiceField's rules and message, on a PlainSelect)."""

    widget = PlainSelect
    _allowed: frozenset[str] | set[str] = frozenset()

    def __init__(self, **kwargs):
        super().__init__(strip=False, required=False, **kwargs)

    @property
    def options(self) -> list[tuple[str, str]]:
        return self.widget.options

    @options.setter
    def options(self, options: list[tuple[str, str]]) -> None:
        self.widget.options = options
        self._allowed = {v for v, _ in options}

    def validate(self, value):
        if value not in self._allowed:
            raise forms.ValidationError(f"Select a valid choice. {value} is not one of the available choices.",
                                        code="invalid_choice")


class ChildForm(forms.Form):
    """A new department under one the user may place departments under (the quota tree page)."""

    name = forms.SlugField(max_length=64, help_text="Letters, digits and dashes; names are permanent")
    parent = NameChoiceField(label="Under")

    def __init__(self, *args, parents: list[tuple[str, str]], **kwargs):
        super().__init__(*args, prefix="child", label_suffix="", **kwargs)
        self.fields["parent"].options = parents


class MoveForm(forms.Form):
    """Move a department the user manages under another place in their subtree."""

    department = NameChoiceField()
    parent = NameChoiceField(label="Under")

    def __init__(self, *args, managed: list[str], parents: list[tuple[str, str]], **kwargs):
        super().__init__(*args, prefix="move", label_suffix="", **kwargs)
        self.fields["department"].options = [(n, n) for n in managed]
        self.fields["parent"].options = parents


class TreeQuotaForm(forms.Form):
    """One department's quota of one resource key: own, borrow limit and lend limit (the quota tree page)."""

    department = NameChoiceField()
    resource = forms.ChoiceField(help_text="A GPU model, CPU (millicores) or memory (MiB)")
    own = forms.DecimalField(min_value=0, max_digits=14, decimal_places=3)
    borrowed = forms.DecimalField(min_value=0, max_digits=14, decimal_places=3, initial=0, label="Borrow limit")
    lend_limit = forms.DecimalField(min_value=0, max_digits=14, decimal_places=3, required=False,
                                    label="Lend limit", help_text="Empty: all of its own may be lent")

    def __init__(self, *args, managed: list[str], resources: list[str], **kwargs):
        super().__init__(*args, prefix="quota", label_suffix="", **kwargs)
        self.fields["department"].options = [(n, n) for n in managed]
        self.fields["resource"].choices = [(r, {"cpu": "CPU", "memory": "Memory"}.get(r, r)) for r in resources]
