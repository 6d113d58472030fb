"""The OpenAPI schema states every status an operation can answer with, and the one error body of the API."""
import re

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
    "409": "Refused by the current state: a name taken, an object in use or in the wrong state (nothing changed)",
    "429": "Too many requests; retry after the Retry-After header",
}
# drf-spectacular's decimal pattern ^-?\d{0,N}(?:\.\d{0,M})?$ admits "", "-" and "." (DRF refuses them):
# at least one digit, before or after the point.
LOOSE_DECIMAL = re.compile(r"^\^-\?\\d\{0,(\d+)\}\(\?:\\\.\\d\{0,(\d+)\}\)\?\$$")
THROTTLED = {("post", "/api/auth/token/"), ("post", "/api/jobs/")}


def document_errors(result: dict, generator, request, public) -> dict:
    """drf-spectacular postprocessing hook: add the error responses each operation can give; state decimals
    as DRF parses them."""
    _strict_decimals(result)
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
    if method != "get" and not open_to_all:
        statuses.append("409")
    if (method, path) in THROTTLED:
        statuses.append("429")
    return statuses


def _strict_decimals(node) -> None:
    if isinstance(node, dict):
        match = LOOSE_DECIMAL.match(node.get("pattern", "")) if node.get("format") == "decimal" else None
        if match:
            whole, places = match.groups()
            node["pattern"] = rf"^-?(?:\d{{1,{whole}}}(?:\.\d{{0,{places}}})?|\.\d{{1,{places}}})$"
        for value in node.values():
            _strict_decimals(value)
    elif isinstance(node, list):
        for value in node:
            _strict_decimals(value)
