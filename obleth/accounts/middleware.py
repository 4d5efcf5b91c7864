"""Puts every request in the audit context, so writes made while it runs name their author."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from obleth.accounts.audit import request_context


class AuditContextMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        with request_context(request):
            return self.get_response(request)
