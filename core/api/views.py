"""What every app's API views share."""


class RestrictedMixin:
    """Every list and detail goes through the model's `restrict(user)`: 404 for what a user may not see."""

    base_queryset = None

    def get_queryset(self):
        return self.base_queryset.restrict(self.request.user)
