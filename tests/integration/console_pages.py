"""What every rendered console page must never show: the template language itself (a `{# … #}` comment spread over
lines renders as text in Django, as would a tag or variable a template failed to parse). Closing `}}` and `%}`
alone are left out: a chart's JSON may end two objects at once."""
TEMPLATE_SYNTAX = ("{#", "#}", "{%", "{{")


def assert_no_template_syntax(html: str, where: str) -> None:
    found = [token for token in TEMPLATE_SYNTAX if token in html]
    assert not found, f"{where} shows template syntax {found}: …{_around(html, found[0])}…"


def _around(html: str, token: str, width: int = 80) -> str:
    at = html.index(token)
    return html[max(0, at - width):at + width]
