from django.contrib import admin
from django.urls import include, path

from obleth.health import healthz

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("api/", include("obleth.api.urls")),
    path("v1/", include("obleth.gateway.urls")),
]

handler400 = "obleth.api.errors.bad_request"
handler404 = "obleth.api.errors.not_found"
