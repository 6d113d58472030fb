from django.apps import AppConfig


class CoreConfig(AppConfig):
    """What every app shares: departments and GPU models, the decision log, errors, API and admin plumbing."""

    name = "core"
    verbose_name = "Tidal core"
