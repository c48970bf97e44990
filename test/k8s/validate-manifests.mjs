/**
 * Validates Kubernetes objects with the kubernetes-models classes: reads a JSON array of objects
 * on stdin, writes a JSON array with, for each object, null (valid) or why it is not.
 *
 * A separate Node process, run by manifests.test.ts: kubernetes-models and @kubernetes-models/*
 * are ESM-only and their "exports" maps offer only the "import" condition, which jest's CommonJS
 * resolver cannot use (transforming them is not enough: they cannot even be resolved). Node's own
 * ESM loader resolves them as published.
 */
import { readFileSync } from "node:fs";
import { ConfigMap } from "kubernetes-models/v1/ConfigMap";
import { Namespace } from "kubernetes-models/v1/Namespace";
import { Secret } from "kubernetes-models/v1/Secret";
import { Service } from "kubernetes-models/v1/Service";
import { Deployment } from "kubernetes-models/apps/v1/Deployment";
import { StatefulSet } from "kubernetes-models/apps/v1/StatefulSet";
import { HorizontalPodAutoscaler } from "kubernetes-models/autoscaling/v2/HorizontalPodAutoscaler";
import { Job } from "kubernetes-models/batch/v1/Job";
import { Ingress } from "kubernetes-models/networking.k8s.io/v1/Ingress";
import { NetworkPolicy } from "kubernetes-models/networking.k8s.io/v1/NetworkPolicy";
import { PodDisruptionBudget } from "kubernetes-models/policy/v1/PodDisruptionBudget";

/** The kinds the manifests may use, by "apiVersion kind"; any other one is refused. */
const MODELS = new Map(
	[ConfigMap, Namespace, Secret, Service, Deployment, StatefulSet, Job, HorizontalPodAutoscaler, Ingress, NetworkPolicy, PodDisruptionBudget].map(Model => [
		`${Model.apiVersion} ${Model.kind}`,
		Model
	])
);

function check(object) {
	const Model = MODELS.get(`${object?.apiVersion} ${object?.kind}`);
	if (!Model) return `no kubernetes-models class for apiVersion "${object?.apiVersion}" kind "${object?.kind}" (known: ${[...MODELS.keys()].join(", ")})`;
	try {
		new Model(object).validate();
		return null;
	} catch (err) {
		return err instanceof Error ? err.message : String(err);
	}
}

const objects = JSON.parse(readFileSync(0, "utf8"));
process.stdout.write(JSON.stringify(objects.map(check)));
