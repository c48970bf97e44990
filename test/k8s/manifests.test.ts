/**
 * The Kubernetes manifests of k8s/: every document is a valid object of a known kind (the
 * kubernetes-models schemas), the objects of the deployment are all there, every Deployment is
 * sized, probed and stops gracefully, sets only variables the code reads, and the Secret in the
 * repository holds placeholders only.
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { parseAllDocuments } from "yaml";

const ROOT = path.resolve(__dirname, "../..");
const K8S_DIR = path.join(ROOT, "k8s");
const VALIDATOR = path.join(__dirname, "validate-manifests.mjs");

const IMAGE = "settlement-coordination-service:0.1.0";
const NAMESPACE = "settlement";

interface EnvVar {
	name: string;
	value?: string;
	valueFrom?: { secretKeyRef?: { name: string; key: string }; configMapKeyRef?: { name: string; key: string } };
}

interface EnvFromSource {
	prefix?: string;
	configMapRef?: { name: string };
	secretRef?: { name: string };
}

interface Container {
	name: string;
	image?: string;
	command?: string[];
	args?: string[];
	env?: EnvVar[];
	envFrom?: EnvFromSource[];
	ports?: { name?: string; containerPort: number }[];
	resources?: { requests?: Record<string, string>; limits?: Record<string, string> };
	readinessProbe?: Probe;
	livenessProbe?: Probe;
	volumeMounts?: { name: string; mountPath: string }[];
}

interface Probe {
	httpGet?: { path: string; port: number | string };
	exec?: { command: string[] };
}

interface PodSpec {
	containers: Container[];
	initContainers?: Container[];
	terminationGracePeriodSeconds?: number;
	securityContext?: { runAsNonRoot?: boolean; runAsUser?: number };
	volumes?: { name: string; emptyDir?: object; secret?: { secretName: string; items?: { key: string }[] } }[];
}

interface LabelSelector {
	matchLabels?: Record<string, string>;
}

/** The fields these tests read; the schemas (kubernetes-models) vouch for the rest. */
interface K8sObject {
	apiVersion: string;
	kind: string;
	metadata: { name: string; namespace?: string; labels?: Record<string, string> };
	data?: Record<string, string>;
	stringData?: Record<string, string>;
	spec?: {
		replicas?: number;
		selector?: LabelSelector | Record<string, string>;
		template?: { metadata?: { labels?: Record<string, string> }; spec: PodSpec };
		volumeClaimTemplates?: unknown[];
		ports?: { name?: string; port: number; targetPort?: number | string }[];
		scaleTargetRef?: { apiVersion: string; kind: string; name: string };
		minReplicas?: number;
		maxReplicas?: number;
		metrics?: { type: string; resource?: { name: string; target: { type: string; averageUtilization?: number } } }[];
		minAvailable?: number | string;
		ingressClassName?: string;
		rules?: { host?: string; http?: { paths: { path?: string; backend: { service?: { name: string; port: { name?: string; number?: number } } } }[] } }[];
	};
}

interface Document {
	/** File and position, for messages: "k8s/40-gateway.yaml#0". */
	where: string;
	object: K8sObject;
}

function yamlFiles(dir: string): string[] {
	return fs
		.readdirSync(dir, { recursive: true, encoding: "utf8" })
		.filter(file => /\.ya?ml$/.test(file))
		.sort()
		.map(file => path.join(dir, file));
}

function loadDocuments(): Document[] {
	const documents: Document[] = [];
	for (const file of yamlFiles(K8S_DIR)) {
		const relative = path.relative(ROOT, file);
		parseAllDocuments(fs.readFileSync(file, "utf8")).forEach((doc, index) => {
			if ("errors" in doc && doc.errors.length) throw new Error(`${relative}#${index}: ${doc.errors.map(e => e.message).join("; ")}`);
			const object = doc.toJS() as K8sObject | null;
			if (object != null) documents.push({ where: `${relative}#${index}`, object });
		});
	}
	return documents;
}

const documents = loadDocuments();
const objects = documents.map(d => d.object);
const label = (o: K8sObject) => `${o.kind} ${o.metadata?.name}`;

function find(apiVersion: string, kind: string, name: string): K8sObject | undefined {
	return objects.find(o => o.apiVersion === apiVersion && o.kind === kind && o.metadata.name === name);
}

function get(apiVersion: string, kind: string, name: string): K8sObject {
	const object = find(apiVersion, kind, name);
	if (!object) throw new Error(`k8s/ has no ${apiVersion} ${kind} named ${name}`);
	return object;
}

const deployments = objects.filter(o => o.apiVersion === "apps/v1" && o.kind === "Deployment");
const podSpec = (o: K8sObject): PodSpec => o.spec!.template!.spec;
const allContainers = (o: K8sObject): Container[] => [...(podSpec(o).initContainers ?? []), ...podSpec(o).containers];
const envValue = (container: Container, name: string) => container.env?.find(e => e.name === name)?.value;

/** Whether selector (matchLabels, or a Service's plain map) selects the pods of workload. */
function selects(selector: LabelSelector | Record<string, string> | undefined, workload: K8sObject): boolean {
	const wanted = (selector && "matchLabels" in selector ? (selector as LabelSelector).matchLabels : selector) as Record<string, string> | undefined;
	const labels = workload.spec?.template?.metadata?.labels ?? {};
	return !!wanted && Object.keys(wanted).length > 0 && Object.entries(wanted).every(([key, value]) => labels[key] === value);
}

/**
 * The variables the code reads: every name lib/config.ts passes to its env helpers, plus NODE_ENV
 * (read by Node and Moleculer).
 */
function variablesTheCodeReads(): Set<string> {
	const source = fs.readFileSync(path.join(ROOT, "lib/config.ts"), "utf8");
	const names = new Set(["NODE_ENV"]);
	for (const match of source.matchAll(/\b(?:text|integer|flag|list|oneOf|baseUrl|base58Address)\(env, "([A-Z_][A-Z0-9_]*)"/g)) names.add(match[1]);
	return names;
}

/** Every variable name a Deployment's container receives, with where it comes from. */
function variablesSet(container: Container): { name: string; from: string }[] {
	const set = (container.env ?? []).map(e => ({ name: e.name, from: "env" }));
	for (const source of container.envFrom ?? []) {
		const [kind, ref] = source.configMapRef ? (["ConfigMap", source.configMapRef] as const) : (["Secret", source.secretRef] as const);
		if (!ref) throw new Error(`envFrom of container ${container.name} names neither a ConfigMap nor a Secret`);
		const object = find("v1", kind, ref.name);
		if (!object) throw new Error(`envFrom of container ${container.name} names ${kind} ${ref.name}, which k8s/ does not define`);
		for (const key of [...Object.keys(object.data ?? {}), ...Object.keys(object.stringData ?? {})])
			set.push({ name: `${source.prefix ?? ""}${key}`, from: `${kind} ${ref.name}` });
	}
	return set;
}

/** Runs validate-manifests.mjs (the kubernetes-models classes) over objects. */
function validateWithModels(input: unknown[]): (string | null)[] {
	const run = spawnSync(process.execPath, [VALIDATOR], { input: JSON.stringify(input), encoding: "utf8", timeout: 60_000 });
	if (run.status !== 0) throw new Error(`validate-manifests.mjs failed (status ${run.status}): ${run.stderr || run.error?.message}`);
	return JSON.parse(run.stdout) as (string | null)[];
}

describe("k8s/ manifests: schemas", () => {
	let results: (string | null)[] = [];

	beforeAll(() => {
		results = validateWithModels(objects);
	});

	it("finds manifests", () => {
		expect(documents.length).toBeGreaterThan(10);
	});

	it.each(documents.map((d, i) => [`${d.where} ${label(d.object)}`, i] as const))("%s validates against its kubernetes-models class", (_name, index) => {
		expect(results[index]).toBeNull();
	});

	it("the validator refuses an unknown kind and an invalid object (so a pass means something)", () => {
		const [unknownKind, invalid, valid] = validateWithModels([
			{ apiVersion: "v1", kind: "Pod2", metadata: { name: "x" } },
			{ apiVersion: "apps/v1", kind: "Deployment", metadata: { name: "x" }, spec: { replicas: "two" } },
			{ apiVersion: "v1", kind: "Namespace", metadata: { name: "x" } }
		]);
		expect(unknownKind).toMatch(/no kubernetes-models class/);
		expect(invalid).toMatch(/replicas must be integer/);
		expect(valid).toBeNull();
	});

	it("puts every namespaced object in the settlement namespace", () => {
		for (const object of objects.filter(o => o.kind !== "Namespace")) expect([label(object), object.metadata.namespace]).toEqual([label(object), NAMESPACE]);
	});
});

describe("k8s/ manifests: the objects of the deployment", () => {
	it("has the Namespace, the ConfigMap and the Secret", () => {
		get("v1", "Namespace", NAMESPACE);
		expect(objects.filter(o => o.apiVersion === "v1" && o.kind === "ConfigMap").length).toBeGreaterThan(0);
		expect(get("v1", "Secret", "settlement-secrets")).toMatchObject({ type: "Opaque" });
	});

	it("runs NATS as a StatefulSet with JetStream on a volumeClaimTemplate, behind a headless and a client Service", () => {
		const nats = get("apps/v1", "StatefulSet", "nats");
		expect(nats.spec!.volumeClaimTemplates?.length).toBeGreaterThan(0);
		const [container] = podSpec(nats).containers;
		expect(container.image).toBe("nats:2.10-alpine");
		const argv = [...(container.command ?? []), ...(container.args ?? [])];
		expect(argv.some(arg => arg === "--jetstream" || arg === "-js")).toBe(true);
		expect(container.readinessProbe?.httpGet?.path).toMatch(/^\/healthz/);
		expect(container.livenessProbe?.httpGet?.path).toMatch(/^\/healthz/);
		const client = get("v1", "Service", "nats");
		expect(client.spec!.ports!.map(p => p.port)).toContain(4222);
		expect(selects(client.spec!.selector, nats)).toBe(true);
		const headless = objects.find(o => o.kind === "Service" && (o.spec as { clusterIP?: string }).clusterIP === "None" && selects(o.spec!.selector, nats));
		expect(headless).toBeDefined();
	});

	it("runs MongoDB as a StatefulSet with a volumeClaimTemplate, behind a Service on 27017", () => {
		const mongodb = get("apps/v1", "StatefulSet", "mongodb");
		expect(mongodb.spec!.volumeClaimTemplates?.length).toBeGreaterThan(0);
		expect(podSpec(mongodb).containers[0].image).toBe("mongo:7");
		const service = get("v1", "Service", "mongodb");
		expect(service.spec!.ports!.map(p => p.port)).toContain(27017);
		expect(selects(service.spec!.selector, mongodb)).toBe(true);
	});

	it.each([
		["gateway", "api"],
		["intake", "receiver,network"],
		["verifier", "verifier"],
		["owners", "mempool,payouts,crankers,tin,epochs,access"]
	])("has the Deployment %s (SERVICES=%s, 2 replicas, the service image)", (name, services) => {
		const deployment = get("apps/v1", "Deployment", name);
		expect(deployment.spec!.replicas).toBe(2);
		const [container] = podSpec(deployment).containers;
		expect(container.image).toBe(IMAGE);
		expect(envValue(container, "SERVICES")).toBe(services);
		// The default command of the image (Dockerfile CMD).
		expect(container.command).toBeUndefined();
		expect(container.args).toBeUndefined();
	});

	it("reaches NATS and MongoDB from every Deployment through the ConfigMap", () => {
		for (const deployment of deployments) {
			const container = podSpec(deployment).containers[0];
			const configMaps = (container.envFrom ?? []).flatMap(source => (source.configMapRef ? [get("v1", "ConfigMap", source.configMapRef.name)] : []));
			const data = Object.assign({}, ...configMaps.map(c => c.data)) as Record<string, string>;
			expect([label(deployment), data.TRANSPORTER, data.MONGO_URL]).toEqual([
				label(deployment),
				"nats://nats.settlement.svc.cluster.local:4222",
				"mongodb://mongodb.settlement.svc.cluster.local:27017/settlement"
			]);
			expect(data.SOLANA_RPC_URL).toBe("https://api.devnet.solana.com");
			expect(data.TRUST_PROXY).toBe("true");
		}
	});

	it("has a PodDisruptionBudget (policy/v1, minAvailable 1) for the owners", () => {
		const owners = get("apps/v1", "Deployment", "owners");
		const pdbs = objects.filter(o => o.apiVersion === "policy/v1" && o.kind === "PodDisruptionBudget" && selects(o.spec!.selector, owners));
		expect(pdbs.map(p => p.spec!.minAvailable)).toEqual([1]);
	});

	it.each([
		["verifier", 2, 10],
		["gateway", 2, 6]
	])("scales the %s Deployment with an autoscaling/v2 HorizontalPodAutoscaler (%i to %i, CPU 70%)", (name, min, max) => {
		const hpas = objects.filter(
			o => o.apiVersion === "autoscaling/v2" && o.kind === "HorizontalPodAutoscaler" && o.spec!.scaleTargetRef?.kind === "Deployment" && o.spec!.scaleTargetRef.name === name
		);
		expect(hpas).toHaveLength(1);
		const [hpa] = hpas;
		expect(hpa.spec!.scaleTargetRef!.apiVersion).toBe("apps/v1");
		expect([hpa.spec!.minReplicas, hpa.spec!.maxReplicas]).toEqual([min, max]);
		expect(hpa.spec!.metrics).toEqual([{ type: "Resource", resource: { name: "cpu", target: { type: "Utilization", averageUtilization: 70 } } }]);
	});

	it("exposes the gateway through a ClusterIP Service (80 → 3000) and an nginx Ingress", () => {
		const gateway = get("apps/v1", "Deployment", "gateway");
		const service = get("v1", "Service", "gateway");
		expect(selects(service.spec!.selector, gateway)).toBe(true);
		expect((service.spec as { type?: string }).type ?? "ClusterIP").toBe("ClusterIP");
		const [port] = service.spec!.ports!;
		expect(port.port).toBe(80);
		const target = typeof port.targetPort === "string" ? podSpec(gateway).containers[0].ports?.find(p => p.name === port.targetPort)?.containerPort : port.targetPort;
		expect(target).toBe(3000);

		const ingress = get("networking.k8s.io/v1", "Ingress", "gateway");
		expect(ingress.spec!.ingressClassName).toBe("nginx");
		const [rule] = ingress.spec!.rules!;
		expect(rule.host).toBe("settlement.example.com");
		expect(rule.http!.paths.map(p => p.backend.service?.name)).toEqual(["gateway"]);
	});
});

describe("k8s/ manifests: every Deployment", () => {
	it("finds the four Deployments", () => {
		expect(deployments.map(d => d.metadata.name).sort()).toEqual(["gateway", "intake", "owners", "verifier"]);
	});

	describe.each(deployments.map(d => [d.metadata.name, d] as const))("%s", (_name, deployment) => {
		const spec = podSpec(deployment);

		it("gives every container resource requests and limits, and readiness and liveness probes", () => {
			for (const container of allContainers(deployment)) {
				expect([container.name, Object.keys(container.resources?.requests ?? {}).sort()]).toEqual([container.name, ["cpu", "memory"]]);
				expect([container.name, Object.keys(container.resources?.limits ?? {}).sort()]).toEqual([container.name, ["cpu", "memory"]]);
				expect(container.readinessProbe).toBeDefined();
				expect(container.livenessProbe).toBeDefined();
			}
		});

		it("probes GET /health/ready and /health/live on the PORT container port (the gateway's routes, or services/health.ts without it)", () => {
			const [container] = spec.containers;
			const http = container.ports?.find(p => p.name === container.readinessProbe?.httpGet?.port || p.containerPort === container.readinessProbe?.httpGet?.port);
			expect(http?.containerPort).toBe(3000);
			expect(container.readinessProbe?.httpGet?.path).toBe("/health/ready");
			expect(container.livenessProbe?.httpGet?.path).toBe("/health/live");
		});

		it("outlasts the process's graceful stop (terminationGracePeriodSeconds > 30; tracking waits 10 s per tier)", () => {
			expect(spec.terminationGracePeriodSeconds).toBeGreaterThan(30);
		});

		it("runs as uid 1000, non-root, with DATA_DIR (/app/data) on an emptyDir", () => {
			expect(spec.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 1000 });
			const mount = spec.containers[0].volumeMounts?.find(m => m.mountPath === "/app/data");
			expect(spec.volumes?.find(v => v.name === mount?.name)?.emptyDir).toBeDefined();
		});

		it("sets only variables the code reads", () => {
			const known = variablesTheCodeReads();
			for (const container of allContainers(deployment)) {
				const unknown = variablesSet(container).filter(v => !known.has(v.name));
				expect(unknown.map(v => `${container.name}: ${v.name} (from ${v.from})`)).toEqual([]);
			}
		});

		it("refers only to Secret and ConfigMap keys that k8s/ defines", () => {
			const keysOf = (kind: string, name: string) => {
				const object = get("v1", kind, name);
				return [...Object.keys(object.data ?? {}), ...Object.keys(object.stringData ?? {})];
			};
			for (const container of allContainers(deployment))
				for (const variable of container.env ?? []) {
					const ref = variable.valueFrom?.secretKeyRef ?? variable.valueFrom?.configMapKeyRef;
					if (ref) expect(keysOf(variable.valueFrom?.secretKeyRef ? "Secret" : "ConfigMap", ref.name)).toContain(ref.key);
				}
			for (const volume of spec.volumes ?? [])
				if (volume.secret) for (const item of volume.secret.items ?? []) expect(keysOf("Secret", volume.secret.secretName)).toContain(item.key);
		});
	});

	it("reads the variable names from lib/config.ts (the check above is not vacuous)", () => {
		const known = variablesTheCodeReads();
		for (const name of ["PORT", "TRANSPORTER", "SERVICES", "DATA_DIR", "MONGO_URL", "WORKER_API_KEYS", "NODE_AUTHORITY_KEYPAIR_PATH", "TRUST_PROXY", "SOLANA_RPC_URL", "NODE_ENV"])
			expect(known).toContain(name);
		expect(known).not.toContain("BOGUS_VARIABLE");
	});

	it("gives the worker API keys to the gateway only, and the authority keypair to the owners only", () => {
		const usesSecret = (deployment: K8sObject) =>
			allContainers(deployment).some(c => c.env?.some(e => e.valueFrom?.secretKeyRef) || c.envFrom?.some(s => s.secretRef)) ||
			(podSpec(deployment).volumes ?? []).some(v => v.secret);
		expect(deployments.filter(usesSecret).map(d => d.metadata.name).sort()).toEqual(["gateway", "owners"]);
		const owners = get("apps/v1", "Deployment", "owners");
		const keypairPath = envValue(podSpec(owners).containers[0], "NODE_AUTHORITY_KEYPAIR_PATH");
		const mount = podSpec(owners).containers[0].volumeMounts?.find(m => keypairPath?.startsWith(`${m.mountPath}/`));
		expect(podSpec(owners).volumes?.find(v => v.name === mount?.name)?.secret?.items?.map(i => i.key)).toEqual(["node-authority-keypair.json"]);
	});
});

describe("k8s/ manifests: secrets", () => {
	const secrets = objects.filter(o => o.apiVersion === "v1" && o.kind === "Secret");

	it("holds placeholders only, never a real secret", () => {
		expect(secrets.length).toBeGreaterThan(0);
		for (const secret of secrets) {
			const values = [...Object.entries(secret.stringData ?? {}), ...Object.entries(secret.data ?? {}).map(([key, value]) => [key, Buffer.from(value, "base64").toString("utf8")])];
			expect(values.length).toBeGreaterThan(0);
			for (const [key, value] of values) expect([label(secret), key, /PLACEHOLDER|REPLACE/.test(value)]).toEqual([label(secret), key, true]);
		}
	});
});
