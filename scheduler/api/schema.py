"""The OpenAPI schema states every status an operation can answer with, and the one error body of the API."""

ERROR = {
    "type": "object",
    "properties": {
        "message": {"type": "string", "description": "What went wrong, as a sentence"},
        "extra": {"type": "object", "description": 'Details; `fields` maps input fields to their problems',
                  "additionalProperties": True},
    },
    "required": ["message", "extra"],
}
WHY = {
    "400": "Invalid input, or a business rule refused it (nothing was changed)",
    "401": "Not signed in",
    "403": "Signed in, but not allowed to do this",
    "404": "No such object, or not one you may see",
    "429": "Too many requests; retry after the Retry-After header",
}
THROTTLED = {("post", "/api/auth/token/"), ("post", "/api/jobs/")}


def document_errors(result: dict, generator, request, public) -> dict:
    """drf-spectacular postprocessing hook: add the error responses each operation can give."""
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR
    ref = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for path, item in result.get("paths", {}).items():
        for method, operation in item.items():
            for status in _errors(method, path, operation):
                operation["responses"].setdefault(status, {"description": WHY[status], "content": ref})
    return result


def _errors(method: str, path: str, operation: dict) -> list[str]:
    open_to_all = {} in operation.get("security", [])  # e.g. the token endpoint
    statuses = ["400"] if method != "delete" or "{" in path else []
    if not open_to_all:
        statuses.append("401")
        if method != "get":
            statuses.append("403")
    if "{" in path:
        statuses.append("404")
    if (method, path) in THROTTLED:
        statuses.append("429")
    return statuses
