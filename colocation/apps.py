from django.apps import AppConfig


class ColocationConfig(AppConfig):
    name = "colocation"
    verbose_name = "Co-location and inference"
