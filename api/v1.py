"""The REST API, version 1: `/api/v1/`, its OpenAPI document at
`/api/v1/openapi.json` and readable docs at `/api/v1/docs` (Swagger UI from
our own static files: the desk's CSP holds there too).

Every operation takes a bearer token (a person's, see api/tokens.py), and
answers an error as an RFC 9457 problem. Reads go through agents.selectors,
writes through the services, via api.writes.write.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ObjectDoesNotExist, RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI, Swagger
from ninja.errors import AuthenticationError, HttpError, ValidationError

from agents.errors import ServiceError
from agents.transitions import IllegalTransition
from api.auth import TokenAuth
from api.problems import CONTENT_TYPE, problem
from api.writes import service_problem

DESCRIPTION = """\
Agentdesk's machine API. Authenticate with `Authorization: Bearer <token>`
(make a token in the desk: *API tokens*). Every write takes an
`Idempotency-Key` header: the same key with the same request answers the
stored first response. Errors are RFC 9457 problem details
(`application/problem+json`).
"""

api = NinjaAPI(
    title="Agentdesk API",
    version="1",
    description=DESCRIPTION,
    auth=TokenAuth(),
    urls_namespace="api-v1",
    docs=Swagger(settings={"persistAuthorization": False}),
    docs_url="/docs",
    openapi_url="/openapi.json",
)


@api.exception_handler(ValidationError)
def _invalid(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    errors = [
        {"loc": list(e.get("loc", [])), "msg": str(e.get("msg", "")), "type": e.get("type", "")}
        for e in exc.errors
    ]
    return problem(422, "the request does not match the schema", slug="validation", errors=errors)


@api.exception_handler(AuthenticationError)
def _unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return problem(
        401,
        "a valid bearer token is required",
        slug="unauthenticated",
        headers={"WWW-Authenticate": "Bearer"},
    )


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    return problem(exc.status_code, str(exc))


@api.exception_handler(Http404)
def _not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return problem(404, str(exc) or "no such resource")


@api.exception_handler(ServiceError)
def _service_error(request: HttpRequest, exc: ServiceError) -> HttpResponse:
    return service_problem(exc)


@api.exception_handler(IllegalTransition)
def _illegal(request: HttpRequest, exc: IllegalTransition) -> HttpResponse:
    return service_problem(exc)


@api.exception_handler(RequestDataTooBig)
def _too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    return problem(413, "the request body is too large", slug="too-large")


@api.exception_handler(ObjectDoesNotExist)
def _missing(request: HttpRequest, exc: ObjectDoesNotExist) -> HttpResponse:
    return problem(404, "no such resource")


_schema = api.get_openapi_schema


def _openapi(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """The generated document, with error responses typed as what they are
    (application/problem+json) and the Idempotency-Key header on writes."""
    schema = _schema(*args, **kwargs)
    for path in schema["paths"].values():
        for method, operation in path.items():
            for status, response in operation.get("responses", {}).items():
                content = response.get("content", {})
                if int(status) >= 400 and "application/json" in content:
                    content[CONTENT_TYPE] = content.pop("application/json")
            if method in ("post", "put", "patch", "delete"):
                operation.setdefault("parameters", []).append(IDEMPOTENCY_PARAMETER)
    return schema


IDEMPOTENCY_PARAMETER = {
    "in": "header",
    "name": "Idempotency-Key",
    "required": False,
    "description": "1-255 characters; the same key with the same request answers the "
    "first response (Idempotent-Replayed: true), with another request 422, while the "
    "first is still running 409. Kept 24 hours.",
    "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "\\S"},
}

api.get_openapi_schema = _openapi  # type: ignore[method-assign]
# Operation ids are the view names (unique across the routers): `sessions_list`.
api.get_openapi_operation_id = lambda operation: operation.view_func.__name__  # type: ignore[method-assign]

from api.routes import approvals, events, sessions  # noqa: E402

api.add_router("/", sessions.router)
api.add_router("/", events.router)
api.add_router("/", approvals.router)
