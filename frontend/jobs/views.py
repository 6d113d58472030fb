"""My jobs, submit, job detail and cancel: thin views over the scheduler's selectors and services."""
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from core import selectors as core_selectors
from core.api.throttling import SubmitThrottle, retry_after
from core.errors import ApplicationError
from frontend import scope
from frontend.forms import apply_errors, safe_next
from frontend.jobs.detail import job_page
from frontend.jobs.forms import JobForm, certified_models, initial_from
from frontend.jobs.tables import JobTable
from frontend.lists import ObjectList
from scheduler import lifecycle, selectors, submission
from scheduler.filtersets import TrainingJobFilterSet
from scheduler.models import JobStatus

KEPT_FILTERS = ("submitter", "task_key", "quota_kind", "submitted_after", "submitted_before", "sort")  # from links
SCOPES = {"mine": "Mine", "departments": "My departments"}
JOB_LIST = ObjectList(table=JobTable, filterset=TrainingJobFilterSet, per_page=25, template="frontend/jobs/list.html",
                      partial="frontend/jobs/_table.html")


@login_required
def job_list(request):
    default = "departments" if request.user.is_staff else "mine"
    chosen = request.GET.get("scope", default)
    chosen = chosen if chosen in SCOPES else default
    department = scope.current_department(request)
    jobs = selectors.listed_jobs(submitter=request.user if chosen == "mine" else None, department=department)
    context = {"scope": chosen, "department": department,
               "choices": {"status": JobStatus.choices, "gpu_model": core_selectors.gpu_model_names(),
                           "department": core_selectors.department_names(user=request.user)},
               "chosen": {"status": request.GET.getlist("status"), "name": request.GET.get("name", ""),
                          "department": request.GET.get("department", ""), "gpu_model": request.GET.get("gpu_model", "")},
               "kept": [(k, v) for k, v in request.GET.items() if k in KEPT_FILTERS and v],
               "scopes": [(key, label if key != "departments" or not request.user.is_staff else "All")
                          for key, label in SCOPES.items()],
               "breadcrumbs": [("Jobs", None)]}
    return JOB_LIST.render(request, jobs, **context)


@login_required
@require_POST
def job_bulk_cancel(request):
    """Cancel the selected jobs the user submitted that are still pending; anything else is left alone."""
    ids = [int(i) for i in request.POST.getlist("job") if i.isdigit()]
    cancelled = [lifecycle.job_cancel(job=job, actor=request.user).pk
                 for job in selectors.own_pending_jobs(user=request.user, ids=ids)]
    skipped = len(set(ids)) - len(cancelled)
    if cancelled:
        messages.success(request, f"Cancelled {len(cancelled)} job(s): " + ", ".join(f"#{i}" for i in cancelled))
    if skipped or not ids:
        messages.warning(request, f"{skipped} selected job(s) were not cancelled: only your own pending jobs can be "
                                  "cancelled in bulk" if ids else "Select your pending jobs to cancel first.")
    return redirect(safe_next(request, reverse("jobs")))


@login_required
def job_submit(request):
    source = None
    if request.method == "POST":
        form, throttle = JobForm(request.POST, user=request.user), SubmitThrottle()
        if not throttle.allow_request(request, None):
            form.add_error(None, f"Too many submissions; try again in {retry_after(throttle)} s. Nothing was submitted.")
        elif form.is_valid():
            try:
                job = submission.job_submit(submitter=request.user, **form.submission())
            except ApplicationError as error:
                apply_errors(form, error)
            else:
                messages.success(request, f"Job #{job.pk} {job.name} submitted. It is scheduled within seconds.")
                return redirect("job", pk=job.pk)
    else:
        initial = {"department": scope.current_department(request) or scope.first_department(request)}
        if request.GET.get("from", "").isdigit():
            source = scope.visible(selectors.jobs(), request, pk=int(request.GET["from"]))
            initial = initial_from(source)
        form = JobForm(initial=initial, user=request.user)
    return render(request, "frontend/jobs/form.html", {
        "form": form, "source": source,
        "breadcrumbs": [("Jobs", reverse("jobs")), ("Submit again" if source else "Submit a job", None)],
    })


@login_required
def gpu_model_options(request):
    """The GPU model <option>s for the framework chosen in the submit form (htmx)."""
    key = request.GET.get("framework", "")
    framework = selectors.framework(pk=int(key)) if key.isdigit() else None
    return render(request, "frontend/jobs/_gpu_options.html", {"models": certified_models(framework)})


@login_required
def job_detail(request, pk: int):
    job = scope.visible(selectors.jobs(details=True), request, pk=pk)
    page = job_page(job=job, now=timezone.now())
    context = {"page": page, "job": job, "can_cancel": not job.is_finished and lifecycle.can_cancel(user=request.user, job=job),
               "can_override": not job.is_finished and core_selectors.can_administer(user=request.user, department=job.department),
               "breadcrumbs": [("Jobs", reverse("jobs")), (f"#{job.pk} {job.name}", None)]}
    template = "frontend/jobs/_live.html" if request.htmx else "frontend/jobs/detail.html"
    return render(request, template, context)


@login_required
@require_POST
def job_keep_request(request, pk: int):
    """An admin's right-sizing override for one job (the same service as the API's keep-request)."""
    job = scope.visible(selectors.jobs(), request, pk=pk)
    try:
        submission.job_keep_request(job=job, keep=request.POST.get("keep") == "1", actor=request.user)
    except ApplicationError as error:
        messages.error(request, error.message)
    return redirect("job", pk=job.pk)


@login_required
def job_cancel(request, pk: int):
    """GET asks for confirmation; POST cancels (the same service and rules as the API)."""
    job = scope.visible(selectors.jobs(), request, pk=pk)
    if request.method == "POST":
        try:
            lifecycle.job_cancel(job=job, actor=request.user)
        except PermissionDenied:
            messages.error(request, "Only the submitter, department admins and operators cancel a job.")
        except ApplicationError as error:
            messages.error(request, error.message)
        else:
            messages.success(request, f"Job #{job.pk} {job.name} cancelled.")
        return redirect("job", pk=job.pk)
    return render(request, "frontend/jobs/cancel.html", {
        "job": job, "allowed": lifecycle.can_cancel(user=request.user, job=job),
        "breadcrumbs": [("Jobs", reverse("jobs")), (f"#{job.pk} {job.name}", reverse("job", args=[job.pk])),
                        ("Cancel", None)],
    })
