"""What the console's pages show, read in one place."""
from django.db.models import Count, Sum

from colocation.models import Node
from scheduler.models import Department, TrainingJob


def cluster_summary() -> dict:
    nodes = Node.objects.aggregate(nodes=Count("id"), gpus=Sum("gpu_count"))
    return {
        "nodes": nodes["nodes"],
        "gpus": nodes["gpus"] or 0,
        "departments": Department.objects.count(),
        "jobs_by_status": dict(TrainingJob.objects.values_list("status").annotate(n=Count("id")).order_by()),
    }
