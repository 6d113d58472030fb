from django import forms


class QuotaForm(forms.Form):
    """One quota's amounts; the service refuses amounts below what the department's jobs hold."""

    own = forms.DecimalField(max_digits=14, decimal_places=3, min_value=0, label="Own")
    borrowed = forms.DecimalField(max_digits=14, decimal_places=3, min_value=0, label="Borrowed")
