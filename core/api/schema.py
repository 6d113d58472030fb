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
# PostgreSQL text cannot hold a NUL character: DRF's CharField and django-filter's text filters refuse one (a 400).
NO_NUL = r"^[^\x00]*$"


TOKEN = ("Exchange a username and password for the user's API token (a form or JSON). Beyond the schema (a 400): "
         "the credentials are those of an active user.")


def document_errors(result: dict, generator, request, public) -> dict:
    """drf-spectacular postprocessing hook: add the error responses each operation can give; state decimals
    as DRF parses them, and that text holds no NUL; describe DRF's token endpoint."""
    _strict_decimals(result)
    _text_without_nul(result)
    token = result.get("paths", {}).get("/api/auth/token/", {}).get("post")
    if token is not None:
        token.setdefault("description", TOKEN)
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


def _text_without_nul(result: dict) -> None:
    """State that free text in requests (query parameters, request bodies) holds no NUL character. `ordering` is
    left free: DRF's OrderingFilter ignores what it does not know."""
    for item in result.get("paths", {}).values():
        for operation in item.values():
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "query" and parameter["name"] != "ordering":
                    _no_nul(parameter["schema"])
    for name, component in result["components"]["schemas"].items():
        if name.endswith("Request"):
            for prop in component.get("properties", {}).values():
                _no_nul(prop.get("items", prop))


def _no_nul(schema: dict) -> None:
    if schema.get("type") == "string" and not {"enum", "format", "pattern"} & schema.keys():
        schema["pattern"] = NO_NUL
