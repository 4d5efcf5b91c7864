"""Routes of the OpenAI-compatible data plane (mounted at /v1/)."""

from __future__ import annotations

from django.urls import URLPattern, path

from obleth.gateway import views

app_name = "gateway"

urlpatterns: list[URLPattern] = [
    path("models", views.list_models, name="models"),
    path("models/<path:name>", views.retrieve_model, name="model"),
    path("chat/completions", views.chat_completions, name="chat-completions"),
    path("completions", views.completions, name="completions"),
    path("embeddings", views.embeddings, name="embeddings"),
]
