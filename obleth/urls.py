from django.contrib import admin
from django.urls import include, path, re_path

from obleth.core.admin_health import model_health_view
from obleth.gateway.elsewhere import served_by_gateway
from obleth.health import healthz
from provisioner.metrics import metrics_view
from recipes.admin_deploy import deploy_urls

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics_view, name="metrics"),
    # Before admin.site.urls, whose catch-all would take it: a model's health timeline.
    path(
        "admin/core/model/<uuid:model_id>/health/",
        admin.site.admin_view(model_health_view),
        name="core_model_health",
    ),
    *deploy_urls(),  # New deployment, the library recipe list
    path("admin/", admin.site.urls),
    path("api/", include("obleth.api.urls")),
    # /v1 is the gateway service's (obleth.gateway.serve): here only a 404 saying so.
    re_path(r"^v1(?:/(?P<rest>.*))?$", served_by_gateway, name="v1-elsewhere"),
]

handler400 = "obleth.api.errors.bad_request"
handler404 = "obleth.api.errors.not_found"
