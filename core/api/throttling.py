"""Rate limits shared by the API and the console (DRF's throttles over the Redis cache, so every web worker counts
the same attempts). Rates are in settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]."""
import hashlib

from rest_framework.throttling import SimpleRateThrottle, UserRateThrottle


class SignInThrottle(SimpleRateThrottle):
    """Password guesses: per client address and user name (token requests and the console's sign-in form)."""

    scope = "sign-in"

    def get_cache_key(self, request, view) -> str:
        data = getattr(request, "data", None) or request.POST
        username = str(data.get("username", "")).strip().lower() if hasattr(data, "get") else ""  # JSON may be a list
        user = hashlib.sha256(username.encode("utf-8", "replace")).hexdigest()[:16]  # keys hold no raw input
        return self.cache_format % {"scope": self.scope, "ident": f"{self.get_ident(request)}:{user}"}


class SubmitThrottle(UserRateThrottle):
    """Job submissions per user, through the API and the console alike."""

    scope = "submit"


def retry_after(throttle: SimpleRateThrottle) -> int:
    return max(1, int(throttle.wait() or 1))
