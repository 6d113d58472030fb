"""`manage.py kwok_nodes`: register one kwok Node per inventory node on the Kubernetes control plane
TIDAL_KUBECONFIG names (the one platform/stack.sh starts), so that Tidal can run on it."""
from __future__ import annotations

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from cluster.kubernetes.kwok import node_object
from colocation.selectors import node_views


class Command(BaseCommand):
    help = "Register one kwok Node per inventory node (and the workloads namespace) on the control plane."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--no-demo", action="store_true", help="the inventory as it is, without the demo")

    def handle(self, *args, no_demo: bool, **options) -> None:
        if not settings.TIDAL_KUBECONFIG:
            raise CommandError("TIDAL_KUBECONFIG is empty: eval \"$(bash platform/stack.sh env)\" first")
        call_command("migrate", verbosity=0)  # as `make run` does, so both see the same inventory
        if not no_demo:
            call_command("load_demo", stdout=self.stdout)
        api = config.new_client_from_config(config_file=settings.TIDAL_KUBECONFIG)
        core = client.CoreV1Api(api)
        for name in {settings.TIDAL_K8S_NAMESPACE, settings.TIDAL_K8S_LEASE_NAMESPACE}:
            self._create(core.create_namespace, {"metadata": {"name": name}})
        views = node_views()
        there = sum(self._create(core.create_node, node_object(view)) for view in views)
        self.stdout.write(f"{len(views) - there} kwok nodes registered ({there} were there already); run Tidal on "
                          "them: TIDAL_CLUSTER_BACKEND=kubernetes make run ARGS=--no-pipeline")

    @staticmethod
    def _create(create, body: dict) -> bool:
        """Create; True when it exists already."""
        try:
            create(body)
        except ApiException as error:
            if error.status != 409:
                raise CommandError(f"{body['metadata']['name']}: {error.status} {error.reason}") from None
            return True
        return False
