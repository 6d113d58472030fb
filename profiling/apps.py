from django.apps import AppConfig

from scheduler.signals import runs_ended


class ProfilingConfig(AppConfig):
    name = "profiling"
    verbose_name = "Task profiles"

    def ready(self) -> None:
        from profiling import services  # Django's way: models (which services import) load after the app configs

        runs_ended.connect(services.runs_ended_summarise, dispatch_uid="profiling.runs_ended_summarise")
