"""What run.sh needs from a rendered overlay (`kubectl kustomize`, on stdin), as YAML on stdout.

    manifests.py namespaces        only the Namespace objects (created for real before the dry run: a dry
                                   run creates nothing, so the objects in a new namespace would be refused)
    manifests.py variants          one line per broken variant: NAME<TAB>what the server's refusal must say
    manifests.py broken NAME       that variant: one object of the rendered overlay with one mistake in it

The broken variants are made from the rendered manifests each time, not kept as copies, so they follow the
real objects: if the object a variant needs is gone from the overlay, this fails instead of testing nothing.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

Obj = dict[str, Any]


def _first_container(obj: Obj) -> Obj:
    container: Obj = obj["spec"]["template"]["spec"]["containers"][0]
    return container


def _set(path: str, value: Any) -> Callable[[Obj], None]:
    """Sets a dotted path under the object (the last key may be new: that is the unknown-field case)."""

    def apply(obj: Obj) -> None:
        *parents, last = path.split(".")
        node = obj
        for key in parents:
            node = node[key]
        node[last] = value

    return apply


@dataclass(frozen=True)
class Variant:
    kind: str
    change: Callable[[Obj], None]
    # A part of the server's answer that names this mistake: a refusal for another reason (a missing
    # namespace, an unknown kind) must not pass for this one.
    refusal: str


def _unknown_container_field(obj: Obj) -> None:
    # `livenessprobe` for `livenessProbe`: a typo that a lenient decoder would silently drop.
    container = _first_container(obj)
    container["livenessprobe"] = copy.deepcopy(container.get("livenessProbe", {}))


VARIANTS: dict[str, Variant] = {
    # Core objects: the API server's strict decoding of the built-in types.
    "deployment-unknown-field": Variant(
        "Deployment", _unknown_container_field, 'unknown field "spec.template.spec.containers[0].livenessprobe"'
    ),
    "deployment-wrong-type": Variant("Deployment", _set("spec.replicas", "three"), "spec.replicas of type int32"),
    # Custom resources: the structural schema of the published CRDs.
    "scaledobject-unknown-field": Variant(
        # maxReplicas is the HorizontalPodAutoscaler's name for KEDA's maxReplicaCount.
        "ScaledObject",
        _set("spec.maxReplicas", 4),
        'unknown field "spec.maxReplicas"',
    ),
    "scaledobject-wrong-type": Variant(
        "ScaledObject", _set("spec.maxReplicaCount", "many"), "spec.maxReplicaCount in body must be of type integer"
    ),
    "kafkatopic-no-partitions": Variant(
        "KafkaTopic", _set("spec.partitions", 0), "spec.partitions in body should be greater than or equal to 1"
    ),
}


def _objects() -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(sys.stdin) if doc]


def _dump(objects: list[Obj]) -> None:
    yaml.safe_dump_all(objects, sys.stdout, sort_keys=False)


def main(argv: list[str]) -> int:
    match argv:
        case ["namespaces"]:
            _dump([obj for obj in _objects() if obj.get("kind") == "Namespace"])
        case ["variants"]:
            for name, variant in VARIANTS.items():
                print(f"{name}\t{variant.refusal}")
        case ["broken", name] if name in VARIANTS:
            variant = VARIANTS[name]
            found = [obj for obj in _objects() if obj.get("kind") == variant.kind]
            if not found:
                print(f"manifests.py: no {variant.kind} in the rendered overlay for {name}", file=sys.stderr)
                return 1
            obj = found[0]
            variant.change(obj)
            _dump([obj])
        case _:
            print(__doc__, file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
