"""The console's pages. Until the console issue lands, the home page points to the API, docs and admin."""
from django.shortcuts import render

from frontend import selectors


def home(request):
    return render(request, "frontend/home.html", {"summary": selectors.cluster_summary()})
