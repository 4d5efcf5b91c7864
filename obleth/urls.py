from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include("obleth.api.urls")),
    path("v1/", include("obleth.gateway.urls")),
]
