from rest_framework.pagination import LimitOffsetPagination


class OblethPagination(LimitOffsetPagination):
    """?limit= (default 50, at most 500) and ?offset=."""

    default_limit = 50
    max_limit = 500
