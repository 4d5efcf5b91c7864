"""Management API routes: /api/v1/..., the OpenAPI schema at /api/schema/ and Swagger UI at
/api/docs/. Every route needs a bearer token (personal or the bootstrap admin token) or a staff
session, and the permission the route names (obleth.api.permissions). A trailing slash is
optional everywhere."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import SimpleRouter

from obleth.accounts import api as accounts_api
from obleth.api import drain_signal, health, joblogs, schema, views
from obleth.api.auth import IsStaff
from obleth.gateway.api import GatewayKeyViewSet
from recipes.api import DeployView

app_name = "api"

_extensions = (schema.AdminTokenScheme,)  # registers the bearer scheme with drf-spectacular

#: Optional trailing slash; a non-capturing group so the schema shows paths without one.
SLASH = "(?:/)?"
UUID = views.UUID_RE

router = SimpleRouter()
router.trailing_slash = SLASH
router.register("models", views.ModelViewSet, basename="model")
router.register(
    rf"models/(?P<model_id>{UUID})/endpoints", views.ModelEndpointViewSet, basename="model-endpoint"
)
router.register(
    rf"models/(?P<model_id>{UUID})/replicas", views.ModelReplicaViewSet, basename="model-replica"
)
router.register("endpoints", views.EndpointViewSet, basename="endpoint")
router.register("managed", views.ManagedSpecListViewSet, basename="managed")
router.register("replicas", views.ReplicaViewSet, basename="replica")
router.register("deployments/launches", views.LaunchViewSet, basename="launch")
router.register("recipes", views.RecipeViewSet, basename="recipe")
router.register("alerts", views.AlertViewSet, basename="alert")
router.register("tokens", accounts_api.ApiTokenViewSet, basename="token")
router.register("audit", accounts_api.AuditEntryViewSet, basename="audit")
router.register("gateway-keys", GatewayKeyViewSet, basename="gateway-key")

v1: list[URLPattern | URLResolver] = [
    re_path(
        rf"^models/(?P<model_id>{UUID})/managed{SLASH}$",
        views.ManagedSpecView.as_view(),
        name="model-managed",
    ),
    re_path(
        rf"^models/(?P<model_id>{UUID})/managed/provision-error{SLASH}$",
        views.ProvisionErrorView.as_view(),
        name="model-provision-error",
    ),
    re_path(
        rf"^models/(?P<model_id>{UUID})/health-history{SLASH}$",
        health.ModelHealthHistoryView.as_view(),
        name="model-health-history",
    ),
    re_path(rf"^deployments{SLASH}$", DeployView.as_view(), name="deploy"),
    re_path(rf"^settings/slurm{SLASH}$", views.SlurmSettingsView.as_view(), name="slurm-settings"),
    re_path(rf"^settings/slurm/test{SLASH}$", views.SlurmTestView.as_view(), name="slurm-test"),
    re_path(
        rf"^slurm/resources{SLASH}$", views.SlurmResourcesView.as_view(), name="slurm-resources"
    ),
    re_path(
        rf"^provisioner/status{SLASH}$",
        views.ProvisionerStatusView.as_view(),
        name="provisioner-status",
    ),
    re_path(
        rf"^replicas/(?P<pk>{UUID})/log{SLASH}$",
        joblogs.ReplicaLogView.as_view(),
        name="replica-log",
    ),
    re_path(
        rf"^replicas/(?P<pk>{UUID})/drain-signal{SLASH}$",
        drain_signal.DrainSignalView.as_view(),
        name="replica-drain-signal",
    ),
    *router.urls,
]

urlpatterns: list[URLPattern | URLResolver] = [
    path("v1/", include(v1)),
    path("schema/", SpectacularAPIView.as_view(permission_classes=[IsStaff]), name="schema"),
    path(
        "docs/",
        SpectacularSwaggerSplitView.as_view(url_name="api:schema", permission_classes=[IsStaff]),
        name="docs",
    ),
]
