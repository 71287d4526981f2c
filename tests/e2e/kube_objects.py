"""What the Kubernetes API server does to objects, as pure functions: the test emulator's rules.

Patches (JSON merge patch, JSON patch with `test`, strategic merge treated as a merge patch),
the metadata the server owns (uid, resourceVersion, generation, creationTimestamp), the status
subresource's split of an object, label and field selectors, owner references, and the
resources a CustomResourceDefinition adds. `kube_api.KubeEmulator` applies them over HTTP.
"""

from __future__ import annotations

import base64
import copy
import re
import uuid
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

import jsonpatch
import jsonpointer

Object = dict[str, Any]

JSON_PATCH = "application/json-patch+json"
# Fields that only the API server writes; a client's value is ignored.
SERVER_OWNED_METADATA = ("uid", "creationTimestamp", "generation", "resourceVersion",
                         "deletionTimestamp", "deletionGracePeriodSeconds")


class PatchRejected(Exception):
    """A patch that cannot be applied (a failed `test`, a bad path): HTTP 422."""


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: mappings merge, None removes a key, anything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def apply_patch(obj: Object, body: Any, content_type: str) -> Object:
    """The object after a PATCH of `content_type` (strategic and apply patches merge)."""
    if content_type != JSON_PATCH:
        if not isinstance(body, Mapping):
            raise PatchRejected(f"a {content_type} body must be a JSON object")
        return merge_patch(obj, body)
    try:
        return jsonpatch.apply_patch(obj, body, in_place=False)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as problem:
        raise PatchRejected(str(problem)) from None


def stamp_new(obj: Object, *, namespace: str | None, api_version: str, kind: str,
              revision: int) -> Object:
    """A created object with the metadata the server gives it."""
    created = copy.deepcopy(obj)
    metadata = created.setdefault("metadata", {})
    for key in SERVER_OWNED_METADATA:
        metadata.pop(key, None)
    if not metadata.get("name") and metadata.get("generateName"):
        metadata["name"] = metadata["generateName"] + uuid.uuid4().hex[:5]
    if namespace is not None:
        metadata["namespace"] = namespace
    metadata.update(uid=str(uuid.uuid4()), creationTimestamp=now(), generation=1,
                    resourceVersion=str(revision))
    created.update(apiVersion=api_version, kind=kind)
    return created


def stamp_update(old: Object, new: Object, *, revision: int, status_subresource: bool,
                 writing_status: bool) -> Object:
    """An updated object: what the request may change of it, and the server's metadata.

    With a status subresource, a write to the object keeps the old status and a write to
    `/status` changes nothing but the status; `generation` counts changes of the rest."""
    updated = copy.deepcopy(new)
    if writing_status:
        updated = {**copy.deepcopy(old), "status": updated.get("status", {})}
    elif status_subresource:
        updated.pop("status", None)
        if "status" in old:
            updated["status"] = copy.deepcopy(old["status"])
    metadata = updated.setdefault("metadata", {})
    for key in ("name", "namespace", *SERVER_OWNED_METADATA):
        if key in old["metadata"]:
            metadata[key] = old["metadata"][key]
        else:
            metadata.pop(key, None)
    if _desired_state(updated) != _desired_state(old):
        metadata["generation"] = int(old["metadata"].get("generation", 1)) + 1
    metadata["resourceVersion"] = str(revision)
    return updated


def same_content(old: Object, new: Object) -> bool:
    """Whether an update changed nothing (the server then keeps the resourceVersion)."""
    def without_version(obj: Object) -> Object:
        trimmed = copy.deepcopy(obj)
        trimmed.get("metadata", {}).pop("resourceVersion", None)
        return trimmed

    return without_version(old) == without_version(new)


def _desired_state(obj: Object) -> Object:
    return {key: value for key, value in obj.items() if key not in ("metadata", "status")}


def secret_with_data(secret: Object) -> Object:
    """A Secret's `stringData` moves into `data`, base64-encoded, as the server stores it."""
    if "stringData" not in secret:
        return secret
    stored = copy.deepcopy(secret)
    encoded = {key: base64.b64encode(str(value).encode()).decode()
               for key, value in (stored.pop("stringData") or {}).items()}
    stored["data"] = {**(stored.get("data") or {}), **encoded}
    return stored


# --- selectors --------------------------------------------------------------------------------

_SET_TERM = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split_terms(selector: str) -> list[str]:
    """Split at commas outside parentheses (`a in (x,y),b=c` has two terms)."""
    terms, depth, current = [], 0, ""
    for char in selector:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    return [term.strip() for term in [*terms, current] if term.strip()]


def labels_match(labels: Mapping[str, str], selector: str) -> bool:
    """A label selector as `kubectl -l` writes it: =, ==, !=, in, notin, key, !key."""
    for term in _split_terms(selector):
        found = _SET_TERM.match(term)
        if found:
            key, operator, values = found.groups()
            allowed = {value.strip() for value in values.split(",")}
            inside = key in labels and labels[key] in allowed
            if inside != (operator == "in"):
                return False
        elif "!=" in term:
            key, value = (part.strip() for part in term.split("!=", 1))
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = (part.strip() for part in term.replace("==", "=").split("=", 1))
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:].strip() in labels:
                return False
        elif term not in labels:
            return False
    return True


def fields_match(obj: Object, selector: str) -> bool:
    """A field selector of equalities over dotted paths (`metadata.name=x,status.phase!=y`)."""
    for term in _split_terms(selector):
        negated = "!=" in term
        path, _, value = term.replace("!=", "=").replace("==", "=").partition("=")
        node: Any = obj
        for part in path.strip().split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        actual = "" if node is None else str(node)
        if (actual == value.strip()) == negated:
            return False
    return True


def selected(obj: Object, params: Mapping[str, str]) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    return labels_match(labels, params.get("labelSelector", "")) and \
        fields_match(obj, params.get("fieldSelector", ""))


# --- ownership, deletion, custom resources ----------------------------------------------------

def owner_uids(obj: Object) -> set[str]:
    return {reference.get("uid", "") for reference in
            obj.get("metadata", {}).get("ownerReferences") or []}


def deletable_now(obj: Object) -> bool:
    """Marked for deletion and held by no finalizer, nor by a kubelet still stopping it
    (a grace period): the server removes it."""
    metadata = obj.get("metadata", {})
    return bool(metadata.get("deletionTimestamp")) and not metadata.get("finalizers") \
        and not metadata.get("deletionGracePeriodSeconds")


def custom_resources(crd: Object) -> list[tuple[str, str, str, dict[str, Any], Object | None]]:
    """(group, version, plural, discovery info, openAPIV3Schema) of each served version."""
    spec = crd.get("spec", {})
    names = spec.get("names", {})
    found = []
    for version in spec.get("versions", []):
        if not version.get("served", True):
            continue
        info = {"kind": names.get("kind"), "singular": names.get("singular"),
                "namespaced": spec.get("scope", "Namespaced") == "Namespaced",
                "shortnames": set(names.get("shortNames") or []),
                "categories": set(names.get("categories") or []),
                "subresources": set((version.get("subresources") or {}).keys()),
                "verbs": {"get", "list", "watch", "create", "update", "patch", "delete"}}
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        found.append((spec.get("group", ""), version["name"], names.get("plural", ""), info,
                      schema))
    return found


def json_schema(schema: Any) -> Any:
    """An OpenAPI v3 structural schema as the JSON Schema (draft 4) that checks the same types,
    enums, bounds and required fields (unknown fields are `prune`'s business)."""
    if isinstance(schema, list):
        return [json_schema(item) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    converted = {key: json_schema(value) for key, value in schema.items()
                 if not key.startswith("x-kubernetes-") and key != "nullable"}
    if schema.get("nullable") and "type" in converted:
        converted["type"] = [converted["type"], "null"]
    if schema.get("x-kubernetes-int-or-string"):
        converted.pop("type", None)
        converted["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    return converted


def prune(value: Any, schema: Mapping[str, Any], path: str = "") -> tuple[Any, list[str]]:
    """`value` without the fields its structural schema does not know, and their paths: the
    API server drops them, or rejects the request when asked for strict field validation."""
    unknown: list[str] = []
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        items = []
        for index, item in enumerate(value):
            kept, found = prune(item, schema["items"], f"{path}[{index}]")
            items.append(kept)
            unknown += found
        return items, unknown
    if not isinstance(value, Mapping) or schema.get("x-kubernetes-preserve-unknown-fields"):
        return value, unknown
    properties = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    kept_fields = {}
    for key, item in value.items():
        where = f"{path}.{key}" if path else key
        inner = properties.get(key, extra if isinstance(extra, Mapping) else None)
        if inner is None and key not in properties and extra is not True:
            unknown.append(where)
            continue
        kept_fields[key], found = prune(item, inner or {}, where)
        unknown += found
    return kept_fields, unknown
