"""``{% gateway_open_banner %}``: the admin warning shown when /v1 takes requests without keys."""

from __future__ import annotations

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from obleth.gateway.auth import gateway_open

register = template.Library()


@register.simple_tag
def gateway_open_banner() -> SafeString | str:
    if not gateway_open():
        return ""
    return format_html(
        '<ul class="messagelist" id="gateway-open-banner"><li class="warning">{}</li></ul>',
        "The gateway is OPEN (OBLETH_GATEWAY_OPEN=1): /v1 answers anyone, without a key, for "
        "every model. Unset it and create gateway keys before sharing this instance.",
    )
