// Validates KEDA ScaledObjects against KEDA's CRD models (@kubernetes-models/keda): reads a JSON array of
// objects on stdin, prints one JSON line per object ({"name", "errors"}), exits 1 when any is invalid.
// Unknown keys: the models' schemas do not all forbid them, so tests/unit/test_deploy_manifests.py checks
// those itself.
import { readFileSync } from "node:fs";
import { ScaledObject } from "@kubernetes-models/keda/keda.sh/v1alpha1";

const objects = JSON.parse(readFileSync(0, "utf8"));
let failed = false;
for (const obj of objects) {
  const errors = [];
  try {
    new ScaledObject(obj).validate();
  } catch (err) {
    errors.push(String(err && err.message ? err.message : err));
    if (err && Array.isArray(err.errors)) {
      for (const e of err.errors) errors.push(`${e.instancePath || e.dataPath || ""} ${e.message}`);
    }
  }
  if (errors.length) failed = true;
  console.log(JSON.stringify({ name: obj?.metadata?.name ?? null, errors }));
}
process.exit(failed ? 1 : 0);
