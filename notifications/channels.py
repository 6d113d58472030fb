"""How a notification leaves Tidal: e-mail through Django's mail framework, or a JSON POST to a webhook."""
import json
import re
import smtplib
import urllib.error
import urllib.parse
import urllib.request

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.core.validators import validate_email

from notifications.events import Message


class SendError(Exception):
    """The channel refused or could not be reached; the message says why, never the webhook's URL (it often carries
    a token)."""


def send_email(*, to: str, message: Message) -> None:
    try:
        send_mail(message.subject, message.body, settings.DEFAULT_FROM_EMAIL, [to], fail_silently=False)
    except (smtplib.SMTPException, OSError) as error:
        raise SendError(f"e-mail to {to} failed: {error}") from error


def post_webhook(*, url: str, message: Message) -> None:
    host = urllib.parse.urlsplit(url).netloc
    request = urllib.request.Request(url, data=json.dumps(message.webhook_body()).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "User-Agent": "Tidal"})
    try:
        with urllib.request.urlopen(request, timeout=settings.TIDAL_NOTIFY_WEBHOOK_TIMEOUT_S) as response:
            response.read(1024)
    except urllib.error.HTTPError as error:  # a non-2xx answer (urllib follows redirects itself)
        raise SendError(f"webhook at {host} answered HTTP {error.code}") from error
    except (urllib.error.URLError, OSError) as error:
        raise SendError(f"webhook at {host} unreachable: {getattr(error, 'reason', error)}") from error


# An http(s) URL with a host name or address, an optional port and a path of printable ASCII: the API's schema states
# the same pattern, so a URL the schema admits is never refused here.
WEBHOOK_URL_PATTERN = r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[!-~]*)?$"
WEBHOOK_URL_MESSAGE = "must be an http:// or https:// URL with a host"


def webhook_url_errors(url: str) -> list[str]:
    """Why `url` cannot be a webhook, or nothing; empty means no webhook."""
    if not url:
        return []
    if len(url) > 500:
        return ["must be at most 500 characters"]
    return [] if re.fullmatch(WEBHOOK_URL_PATTERN, url) else [WEBHOOK_URL_MESSAGE]  # no trailing newline


ADDRESS_MAX = get_user_model()._meta.get_field("email").max_length


def address_errors(address: str) -> list[str]:
    """Why `address` cannot receive e-mail, or nothing; empty means no e-mail."""
    if not address:
        return []
    if len(address) > ADDRESS_MAX:
        return [f"at most {ADDRESS_MAX} characters"]
    try:
        validate_email(address)
    except ValidationError:
        return ["enter an e-mail address such as alice@example.org, or leave it empty for no e-mail"]
    return []
