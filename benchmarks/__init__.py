"""Benchmark tooling (`manage.py bench scheduler|streaming|console|api`): above every app and the console, imported
by none of them."""
