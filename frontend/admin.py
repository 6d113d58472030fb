"""API tokens are credentials: the Django admin does not list them (DRF's own admin shows every user's key). Each
user reads their own at /api/auth/token/; deactivating a user in the admin revokes theirs."""
from django.contrib import admin
from rest_framework.authtoken.models import TokenProxy

admin.site.unregister(TokenProxy)
