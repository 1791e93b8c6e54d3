#!/usr/bin/env python3
"""tests/launch/k8s_check.py: reads a multi-document Kubernetes manifest back with PyYAML.

  k8s_check.py FILE             prints the documents as one JSON array (for structural tests in C++)
  k8s_check.py --validate FILE  validates each built-in kind (v1, batch/v1) against the Kubernetes OpenAPI schema
                                with kubernetes-validate (strict: unknown fields are errors); custom resources
                                (MPIJob) are skipped with a note. Exit 77 when kubernetes-validate is not installed.
"""
import json
import sys

import yaml


def main(argv):
    validate = argv[1:2] == ["--validate"]
    path = argv[-1]
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d is not None]
    if not validate:
        json.dump(docs, sys.stdout)
        return 0
    try:
        import kubernetes_validate
    except ImportError:
        print("kubernetes-validate is not installed (scripts/setup.sh installs it into .deps/kubeval)")
        return 77
    version = kubernetes_validate.latest_version()
    bad = 0
    for d in docs:
        kind = "{}/{}".format(d.get("apiVersion"), d.get("kind"))
        if d.get("apiVersion") not in ("v1", "batch/v1"):
            print("skip {}: a custom resource, no schema packaged".format(kind))
            continue
        try:
            kubernetes_validate.validate(d, version, strict=True)
            print("ok {} (Kubernetes {})".format(kind, version))
        except Exception as e:  # ValidationError, SchemaNotFoundError, ...
            bad += 1
            print("INVALID {}: {}".format(kind, getattr(e, "message", str(e))))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
