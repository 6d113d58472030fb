from django.apps import AppConfig


class ExperimentsConfig(AppConfig):
    name = "experiments"
    verbose_name = "Experiments"
