/**
 * The Kubernetes manifests of k8s/: every document is a valid object of a known kind (the
 * kubernetes-models schemas), the objects of the deployment are all there, MongoDB is an
 * authenticated replica set initiated by an idempotent Job, NATS requires credentials, the
 * NetworkPolicies admit only the app to the bus and the store, the public Ingress routes only
 * public paths, every pod passes Pod Security "restricted", every workload has a
 * PodDisruptionBudget, every Deployment is sized, probed and stops gracefully and sets only
 * variables the code reads, and the Secret in the repository holds placeholders only.
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import vm from "node:vm";
import { parseAllDocuments } from "yaml";
import { BUS_GROUPS, busGroupServing, natsAuthorization } from "../../lib/bus-groups";
import { CRANKER_ROUTES } from "../../lib/cranker-call";
import { mongoDatabaseName, mongoUrlWeakenings } from "../../lib/store/mongo-url";

const ROOT = path.resolve(__dirname, "../..");
const K8S_DIR = path.join(ROOT, "k8s");
const VALIDATOR = path.join(__dirname, "validate-manifests.mjs");

const IMAGE = "settlement-coordination-service:0.1.0";
const NAMESPACE = "settlement";
const SECRET = "settlement-secrets";
const APP_LABELS = { "app.kubernetes.io/name": "settlement-coordination-service", "app.kubernetes.io/part-of": "settlement-coordination-service" };
const INGRESS_NAMESPACE = { "kubernetes.io/metadata.name": "ingress-nginx" };
const MONGO_MEMBERS = [0, 1, 2].map(i => `mongodb-${i}.mongodb.${NAMESPACE}.svc.cluster.local:27017`);

interface EnvVar {
	name: string;
	value?: string;
	valueFrom?: { secretKeyRef?: { name: string; key: string }; configMapKeyRef?: { name: string; key: string }; fieldRef?: { fieldPath: string } };
}

interface EnvFromSource {
	prefix?: string;
	configMapRef?: { name: string };
	secretRef?: { name: string };
}

interface SecurityContext {
	runAsNonRoot?: boolean;
	runAsUser?: number;
	runAsGroup?: number;
	fsGroup?: number;
	privileged?: boolean;
	allowPrivilegeEscalation?: boolean;
	readOnlyRootFilesystem?: boolean;
	capabilities?: { add?: string[]; drop?: string[] };
	seccompProfile?: { type: string };
}

interface Container {
	name: string;
	image?: string;
	command?: string[];
	args?: string[];
	env?: EnvVar[];
	envFrom?: EnvFromSource[];
	ports?: { name?: string; containerPort: number; hostPort?: number }[];
	resources?: { requests?: Record<string, string>; limits?: Record<string, string> };
	startupProbe?: Probe;
	readinessProbe?: Probe;
	livenessProbe?: Probe;
	volumeMounts?: { name: string; mountPath: string; readOnly?: boolean }[];
	securityContext?: SecurityContext;
}

interface Probe {
	httpGet?: { path: string; port: number | string };
	exec?: { command: string[] };
	tcpSocket?: { port: number | string };
}

interface Volume {
	name: string;
	emptyDir?: { medium?: string };
	secret?: { secretName: string; items?: { key: string; path: string }[]; defaultMode?: number };
	configMap?: { name: string };
	[type: string]: unknown;
}

interface PodSpec {
	containers: Container[];
	initContainers?: Container[];
	terminationGracePeriodSeconds?: number;
	automountServiceAccountToken?: boolean;
	hostNetwork?: boolean;
	hostPID?: boolean;
	hostIPC?: boolean;
	securityContext?: SecurityContext;
	volumes?: Volume[];
	topologySpreadConstraints?: { topologyKey: string; maxSkew: number; whenUnsatisfiable: string; labelSelector?: LabelSelector }[];
	affinity?: { podAntiAffinity?: { requiredDuringSchedulingIgnoredDuringExecution?: { topologyKey: string; labelSelector?: LabelSelector }[] } };
}

interface LabelSelector {
	matchLabels?: Record<string, string>;
	matchExpressions?: unknown[];
}

interface NetworkPolicyPeer {
	podSelector?: LabelSelector;
	namespaceSelector?: LabelSelector;
	ipBlock?: unknown;
}

interface NetworkPolicyRule {
	from?: NetworkPolicyPeer[];
	to?: NetworkPolicyPeer[];
	ports?: { protocol?: string; port?: number | string }[];
}

/** The fields these tests read; the schemas (kubernetes-models) vouch for the rest. */
interface K8sObject {
	apiVersion: string;
	kind: string;
	metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
	data?: Record<string, string>;
	stringData?: Record<string, string>;
	spec?: {
		replicas?: number;
		serviceName?: string;
		podManagementPolicy?: string;
		selector?: LabelSelector | Record<string, string>;
		template?: { metadata?: { labels?: Record<string, string> }; spec: PodSpec };
		volumeClaimTemplates?: unknown[];
		type?: string;
		clusterIP?: string;
		publishNotReadyAddresses?: boolean;
		ports?: { name?: string; port: number; targetPort?: number | string }[];
		scaleTargetRef?: { apiVersion: string; kind: string; name: string };
		minReplicas?: number;
		maxReplicas?: number;
		metrics?: {
			type: string;
			resource?: { name: string; target: { type: string; averageUtilization?: number } };
			object?: { describedObject: { kind: string; name: string }; metric: { name: string } };
			pods?: { metric: { name: string } };
		}[];
		minAvailable?: number | string;
		maxUnavailable?: number | string;
		ingressClassName?: string;
		tls?: { hosts?: string[]; secretName?: string }[];
		rules?: { host?: string; http?: { paths: { path?: string; pathType?: string; backend: { service?: { name: string; port: { name?: string; number?: number } } } }[] } }[];
		podSelector?: LabelSelector;
		policyTypes?: string[];
		ingress?: NetworkPolicyRule[];
		egress?: NetworkPolicyRule[];
	};
}

interface Document {
	/** File and position, for messages: "k8s/40-gateway.yaml#0". */
	where: string;
	/** In k8s/ itself, so applied by `kubectl apply -f k8s/` (not recursive); subfolders hold examples. */
	applied: boolean;
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
			if (object != null) documents.push({ where: `${relative}#${index}`, applied: path.dirname(file) === K8S_DIR, object });
		});
	}
	return documents;
}

const documents = loadDocuments();
const objects = documents.map(d => d.object);
/** What `kubectl apply -f k8s/` creates. */
const applied = documents.filter(d => d.applied).map(d => d.object);
const label = (o: K8sObject) => `${o.kind} ${o.metadata?.name}`;

function find(apiVersion: string, kind: string, name: string): K8sObject | undefined {
	return objects.find(o => o.apiVersion === apiVersion && o.kind === kind && o.metadata.name === name);
}

function get(apiVersion: string, kind: string, name: string): K8sObject {
	const object = find(apiVersion, kind, name);
	if (!object) throw new Error(`k8s/ has no ${apiVersion} ${kind} named ${name}`);
	return object;
}

const deployments = applied.filter(o => o.apiVersion === "apps/v1" && o.kind === "Deployment");
const statefulSets = applied.filter(o => o.apiVersion === "apps/v1" && o.kind === "StatefulSet");
const jobs = applied.filter(o => o.apiVersion === "batch/v1" && o.kind === "Job");
/** Every object with a pod template that `kubectl apply -f k8s/` creates. */
const workloads = [...deployments, ...statefulSets, ...jobs];
const networkPolicies = applied.filter(o => o.apiVersion === "networking.k8s.io/v1" && o.kind === "NetworkPolicy");
const podSpec = (o: K8sObject): PodSpec => o.spec!.template!.spec;
const podLabels = (o: K8sObject): Record<string, string> => o.spec?.template?.metadata?.labels ?? {};
const allContainers = (o: K8sObject): Container[] => [...(podSpec(o).initContainers ?? []), ...podSpec(o).containers];
const envVar = (container: Container, name: string) => container.env?.find(e => e.name === name);
const envValue = (container: Container, name: string) => envVar(container, name)?.value;
const configMapText = (name: string, key: string): string => get("v1", "ConfigMap", name).data?.[key] ?? "";

/** Whether selector (matchLabels, or a Service's plain map) selects the pods of workload. */
function selects(selector: LabelSelector | Record<string, string> | undefined, workload: K8sObject): boolean {
	const wanted = (selector && "matchLabels" in selector ? (selector as LabelSelector).matchLabels : selector) as Record<string, string> | undefined;
	const labels = podLabels(workload);
	return !!wanted && Object.keys(wanted).length > 0 && Object.entries(wanted).every(([key, value]) => labels[key] === value);
}

/** A NetworkPolicy selector's verdict on a label set: an empty selector selects everything. */
function matches(selector: LabelSelector, labels: Record<string, string>): boolean {
	if (selector.matchExpressions?.length) throw new Error("these tests read matchLabels only: extend matches() before using matchExpressions");
	return Object.entries(selector.matchLabels ?? {}).every(([key, value]) => labels[key] === value);
}

/** "everyone": a rule without `from` admits any source. */
type Peer = NetworkPolicyPeer | "everyone";

/** The sources the NetworkPolicies admit to a workload's pods on a TCP port (NetworkPolicy rules add up). */
function admitted(workload: K8sObject, port: number): Peer[] {
	const peers: Peer[] = [];
	for (const policy of networkPolicies) {
		if (!matches(policy.spec!.podSelector ?? {}, podLabels(workload))) continue;
		for (const rule of policy.spec!.ingress ?? []) {
			// A rule may name the port (the container port's name) instead of giving its number.
			const names = allContainers(workload).flatMap(c => (c.ports ?? []).filter(p => p.containerPort === port && p.name).map(p => p.name));
			const portMatches = !rule.ports?.length || rule.ports.some(p => (p.protocol ?? "TCP") === "TCP" && (p.port === undefined || p.port === port || names.includes(String(p.port))));
			if (!portMatches) continue;
			if (rule.from === undefined || rule.from.length === 0) peers.push("everyone");
			else peers.push(...rule.from);
		}
	}
	return peers;
}

/** The workloads of k8s/ whose pods a peer admits (only meaningful for a same-namespace podSelector peer). */
function workloadsAdmittedBy(peer: NetworkPolicyPeer): string[] {
	return workloads.filter(w => matches(peer.podSelector ?? {}, podLabels(w))).map(w => w.metadata.name);
}

/** The container ports of a workload's pods. */
const containerPorts = (workload: K8sObject): number[] => allContainers(workload).flatMap(c => (c.ports ?? []).map(p => p.containerPort));

/**
 * The variables the code reads: every name lib/config.ts passes to a helper as `(env, "NAME"` or
 * reads as `env.NAME`, plus NODE_ENV (read by Node and Moleculer).
 */
function variablesTheCodeReads(): Set<string> {
	const source = fs.readFileSync(path.join(ROOT, "lib/config.ts"), "utf8");
	const names = new Set(["NODE_ENV"]);
	for (const match of source.matchAll(/\b\w+\(env, "([A-Z_][A-Z0-9_]*)"/g)) names.add(match[1]);
	for (const match of source.matchAll(/\benv(?:\.([A-Z_][A-Z0-9_]*)|\["([A-Z_][A-Z0-9_]*)"\])/g)) names.add(match[1] ?? match[2]);
	return names;
}

/** Every variable name a container receives, with where it comes from. */
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

/** The Secret keys a workload's pods read (env and volumes). */
function secretKeysOf(workload: K8sObject): string[] {
	const keys = new Set<string>();
	for (const container of allContainers(workload)) {
		for (const variable of container.env ?? []) if (variable.valueFrom?.secretKeyRef) keys.add(variable.valueFrom.secretKeyRef.key);
		if (container.envFrom?.some(s => s.secretRef)) keys.add("(envFrom: every key)");
	}
	for (const volume of podSpec(workload).volumes ?? [])
		if (volume.secret) for (const item of volume.secret.items ?? [{ key: "(the whole Secret)", path: "" }]) keys.add(item.key);
	return [...keys].sort();
}

/** Whether a variable comes from the Secret's key of the same name. */
const fromSecret = (container: Container, name: string) => envVar(container, name)?.valueFrom?.secretKeyRef;

/** What is wrong with a MONGO_URL for the replica set of k8s/ (empty: nothing). */
function mongoUrlProblems(url: string): string[] {
	const problems: string[] = [];
	const match = /^mongodb:\/\/([^:@/]+):([^@/]+)@([^/?]+)\/([^?]*)\?(.*)$/.exec(url);
	if (!match) return ["not mongodb://<user>:<password>@<members>/<database>?<options>"];
	const hosts = match[3].split(",");
	if (JSON.stringify([...hosts].sort()) !== JSON.stringify(MONGO_MEMBERS)) problems.push(`members ${hosts.join(",")}, not ${MONGO_MEMBERS.join(",")}`);
	const options = new URLSearchParams(match[5]);
	if (options.get("replicaSet") !== "rs0") problems.push("replicaSet is not rs0");
	if (options.get("authSource") !== "admin") problems.push("authSource is not admin");
	// What the app refuses unless MONGO_ALLOW_WEAK_DURABILITY=true (it sets the strong options itself).
	problems.push(...mongoUrlWeakenings(url));
	return problems;
}

/** The routes of a table in services/api.service.ts (`const NAME ... = { "METHOD /path": ... }` or `[...]`). */
function routesOf(table: string): string[] {
	const source = fs.readFileSync(path.join(ROOT, "services/api.service.ts"), "utf8");
	const block = new RegExp(`const ${table}\\b[^=]*=\\s*([[{][\\s\\S]*?[\\]}]);`).exec(source);
	if (!block) throw new Error(`services/api.service.ts has no table ${table}`);
	return [...block[1].matchAll(/"((?:GET|POST|PUT|PATCH|DELETE) \/[^"]*)"/g)].map(m => m[1]);
}

/** A concrete path for a route pattern: each :param becomes an id. */
const samplePath = (route: string) => route.split(" ")[1].replace(/:\w+/g, "abc123");

/** The Ingress paths (ingress-nginx with use-regex: `location ~* "^<path>"`) that route a request path. */
function ingressRoutes(ingress: K8sObject, requestPath: string): string[] {
	return ingress.spec!.rules!.flatMap(rule => (rule.http?.paths ?? []).map(p => p.path ?? "/")).filter(p => new RegExp(`^${p}`, "i").test(requestPath));
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
		expect(get("v1", "Secret", SECRET)).toMatchObject({ type: "Opaque" });
	});

	it.each([
		["gateway", "api"],
		["intake", "receiver,network,webhook-delivery"],
		["verifier", "verifier"],
		["owners", "mempool,payouts,crankers,tin,epochs,access,webhooks"]
	])("has the Deployment %s (SERVICES=%s, 2 replicas at least, the service image)", (name, services) => {
		const deployment = get("apps/v1", "Deployment", name);
		// Scaled by an HPA from 2: no replicas of its own, which a re-apply would reset the count to (an operator's review).
		const scaler = applied.find(doc => doc.kind === "HorizontalPodAutoscaler" && (doc.spec as { scaleTargetRef?: { name?: string } } | undefined)?.scaleTargetRef?.name === name);
		if (scaler) {
			expect(deployment.spec!.replicas).toBeUndefined();
			expect((scaler.spec as { minReplicas?: number }).minReplicas).toBe(2);
		} else expect(deployment.spec!.replicas).toBe(2);
		const [container] = podSpec(deployment).containers;
		expect(container.image).toBe(IMAGE);
		expect(envValue(container, "SERVICES")).toBe(services);
		// The default command of the image (Dockerfile CMD).
		expect(container.command).toBeUndefined();
		expect(container.args).toBeUndefined();
	});

	it("has a PodDisruptionBudget (policy/v1) for every Deployment and StatefulSet, the stateful ones keeping a majority", () => {
		const expected: Record<string, Partial<Record<"minAvailable" | "maxUnavailable", number>>> = {
			gateway: { maxUnavailable: 1 },
			intake: { maxUnavailable: 1 },
			verifier: { maxUnavailable: 1 },
			owners: { minAvailable: 1 },
			nats: { minAvailable: 2 },
			mongodb: { minAvailable: 2 }
		};
		expect([...deployments, ...statefulSets].map(w => w.metadata.name).sort()).toEqual(Object.keys(expected).sort());
		for (const workload of [...deployments, ...statefulSets]) {
			const pdbs = applied.filter(o => o.apiVersion === "policy/v1" && o.kind === "PodDisruptionBudget" && selects(o.spec!.selector, workload));
			expect([label(workload), pdbs.map(p => ({ minAvailable: p.spec!.minAvailable, maxUnavailable: p.spec!.maxUnavailable }))]).toEqual([
				label(workload),
				[{ minAvailable: undefined, maxUnavailable: undefined, ...expected[workload.metadata.name] }]
			]);
		}
	});

	it.each([
		["verifier", 2, 10],
		["gateway", 2, 6],
		["intake", 2, 6]
	])("scales the stateless %s Deployment with an autoscaling/v2 HorizontalPodAutoscaler (%i to %i, CPU 70%)", (name, min, max) => {
		const hpas = applied.filter(
			o => o.apiVersion === "autoscaling/v2" && o.kind === "HorizontalPodAutoscaler" && o.spec!.scaleTargetRef?.kind === "Deployment" && o.spec!.scaleTargetRef.name === name
		);
		expect(hpas).toHaveLength(1);
		const [hpa] = hpas;
		expect(hpa.spec!.scaleTargetRef!.apiVersion).toBe("apps/v1");
		expect([hpa.spec!.minReplicas, hpa.spec!.maxReplicas]).toEqual([min, max]);
		expect(hpa.spec!.metrics).toEqual([{ type: "Resource", resource: { name: "cpu", target: { type: "Utilization", averageUtilization: 70 } } }]);
	});

	it("gives an example (not applied) of the gateway scaling on request rate through a custom metric, CPU kept", () => {
		const examples = documents.filter(d => !d.applied && d.object.kind === "HorizontalPodAutoscaler").map(d => d.object);
		expect(examples.map(e => e.spec!.scaleTargetRef?.name)).toEqual(["gateway"]);
		const metrics = examples[0].spec!.metrics ?? [];
		expect(metrics.map(m => m.object?.metric.name ?? m.pods?.metric.name ?? m.resource?.name)).toEqual(["cpu", "http_requests_per_second"]);
		expect(metrics[1].object?.describedObject).toMatchObject({ kind: "Ingress", name: "gateway" });
	});
});

describe("k8s/ manifests: NATS requires credentials", () => {
	const nats = get("apps/v1", "StatefulSet", "nats");
	const [container] = podSpec(nats).containers;
	const configPath = container.args?.[container.args.indexOf("--config") + 1] ?? "";
	const configMount = container.volumeMounts?.find(m => configPath.startsWith(`${m.mountPath}/`));
	const configMapName = podSpec(nats).volumes?.find(v => v.name === configMount?.name)?.configMap?.name ?? "";
	const configFile = configMapText(configMapName, path.basename(configPath));
	/** The config without its comments. */
	const config = configFile.replace(/#.*$/gm, "");

	it("runs three servers of a pinned image in a cluster, core NATS only, behind a headless and a client Service", () => {
		expect(nats.spec!.replicas).toBe(3);
		// No JetStream (Moleculer uses none): no state, and no quorum a lone server's health would wait for.
		expect(nats.spec!.volumeClaimTemplates).toBeUndefined();
		expect(container.image).toMatch(/^nats:\d+\.\d+\.\d+-alpine$/);
		expect(config).not.toMatch(/\bjetstream\b/);
		for (const probe of [container.startupProbe, container.readinessProbe, container.livenessProbe]) expect(probe?.httpGet?.path).toBe("/healthz");
		const client = get("v1", "Service", "nats");
		expect(client.spec!.ports!.map(p => p.port)).toContain(4222);
		expect(selects(client.spec!.selector, nats)).toBe(true);
		const headless = get("v1", "Service", nats.spec!.serviceName!);
		expect([headless.spec!.clusterIP, headless.spec!.publishNotReadyAddresses, selects(headless.spec!.selector, nats)]).toEqual(["None", true, true]);
		expect(headless.spec!.ports!.map(p => p.port)).toContain(6222);
	});

	const groupPassword = (group: string) => `NATS_PASSWORD_${group.toUpperCase()}`;

	it("reads its config from a ConfigMap with a user per bus group, each password from the environment, anonymous access off", () => {
		expect(configMapName).not.toBe("");
		// The users and their permissions are lib/bus-groups.ts's, for the app's NAMESPACE.
		const namespace = get("v1", "ConfigMap", "settlement-config").data!.NAMESPACE;
		expect(configFile).toContain(natsAuthorization(group => `$${groupPassword(group)}`, namespace));
		expect(config).not.toMatch(/no_auth_user|allow_anonymous/);
		// The config holds no credential of its own.
		expect(config).not.toMatch(/password:\s*["'\w]/);
	});

	it("authenticates the cluster routes too, as a user of their own, with routes to every server", () => {
		expect(config).toMatch(/\bcluster\s*\{[\s\S]*authorization\s*\{\s*user:\s*route\s+password:\s*\$NATS_ROUTE_PASSWORD\b/);
		const routes = /routes:\s*\[([^\]]*)\]/.exec(config)?.[1].split(",").map(r => r.trim().replace(/^\$/, "")) ?? [];
		expect(routes.map(name => envValue(container, name))).toEqual([0, 1, 2].map(i => `nats://route:$(NATS_ROUTE_PASSWORD)@nats-${i}.${nats.spec!.serviceName}.${NAMESPACE}.svc.cluster.local:6222`));
		// The kubelet expands $(NATS_ROUTE_PASSWORD) only from variables defined before.
		const names = (container.env ?? []).map(e => e.name);
		for (const route of routes) expect(names.indexOf(route)).toBeGreaterThan(names.indexOf("NATS_ROUTE_PASSWORD"));
	});

	it("takes every group's password and the routes' from the Secret", () => {
		for (const name of [...Object.keys(BUS_GROUPS).map(groupPassword), "NATS_ROUTE_PASSWORD"]) expect(fromSecret(container, name)).toEqual({ name: SECRET, key: name });
	});

	const natsServer = spawnSync("nats-server", ["--version"], { encoding: "utf8" }).status === 0;
	(natsServer ? it : it.skip)("is a config nats-server accepts, with credentials as the README generates them (nats-server -t)", () => {
		const dir = fs.mkdtempSync(path.join(os.tmpdir(), "nats-config-"));
		try {
			const file = path.join(dir, "nats.conf");
			fs.writeFileSync(file, configFile);
			const password = "n0123456789abcdef0123456789abcdef";
			const env: Record<string, string> = { ...process.env, POD_NAME: "nats-0", NATS_ROUTE_PASSWORD: password, ...Object.fromEntries(Object.keys(BUS_GROUPS).map(group => [groupPassword(group), password])) };
			for (const i of [0, 1, 2]) env[`NATS_ROUTE_${i}`] = `nats://route:${password}@nats-${i}.nats-headless.settlement.svc.cluster.local:6222`;
			const run = spawnSync("nats-server", ["-t", "-c", file], { encoding: "utf8", env });
			expect([run.status, `${run.stdout}${run.stderr}`]).toEqual([0, expect.stringMatching(/valid/)]);
			// Why the README's password starts with a letter: one starting with a digit is read as a number.
			const digit = spawnSync("nats-server", ["-t", "-c", file], { encoding: "utf8", env: { ...env, NATS_PASSWORD_OWNERS: "3e5a0b" } });
			expect(digit.status).not.toBe(0);
		} finally {
			fs.rmSync(dir, { recursive: true, force: true });
		}
	});
});

describe("k8s/ manifests: quorum members", () => {
	it.each(["mongodb", "nats"])("%s puts one member on a node or none, so that one node's loss never takes two (an operator's review)", name => {
		const spec = podSpec(get("apps/v1", "StatefulSet", name));
		// Required anti-affinity: a spread's skew lets two on one node once a node is gone.
		expect(spec.affinity?.podAntiAffinity?.requiredDuringSchedulingIgnoredDuringExecution).toEqual([{ topologyKey: "kubernetes.io/hostname", labelSelector: { matchLabels: { "app.kubernetes.io/name": name } } }]);
		expect(spec.topologySpreadConstraints ?? []).toContainEqual(expect.objectContaining({ topologyKey: "topology.kubernetes.io/zone" }));
	});
});

describe("k8s/ manifests: a NATS server that stops", () => {
	it("goes into lame duck mode first, its clients moved over a while, within the grace period (an operator's review)", () => {
		const nats = get("apps/v1", "StatefulSet", "nats");
		const [server] = podSpec(nats).containers;
		const conf = String((get("v1", "ConfigMap", "nats-config").data as Record<string, string>)["nats.conf"]);
		const seconds = (name: string) => Number(new RegExp(`^\\s*${name}: "(\\d+)s"$`, "m").exec(conf)?.[1]);
		const pidFile = /^\s*pid_file: "([^"]+)"$/m.exec(conf)?.[1];
		expect(pidFile).toBeDefined();
		expect((server as { lifecycle?: { preStop?: { exec?: { command?: string[] } } } }).lifecycle?.preStop?.exec?.command).toEqual(["nats-server", "--signal", `ldm=${pidFile}`]);
		// The pid file's directory is writable (the root file system is not).
		expect(server.volumeMounts?.some(mount => pidFile!.startsWith(`${mount.mountPath}/`) && !mount.readOnly)).toBe(true);
		// The grace period is part of the duration (nats-server closes its clients after the one, within the other).
		expect(seconds("lame_duck_grace_period")).toBeLessThan(seconds("lame_duck_duration"));
		expect(seconds("lame_duck_duration")).toBeLessThan(podSpec(nats).terminationGracePeriodSeconds!);
	});
});

describe("k8s/ manifests: MongoDB is an authenticated replica set", () => {
	const mongodb = get("apps/v1", "StatefulSet", "mongodb");
	const spec = podSpec(mongodb);
	const [mongod] = spec.containers;
	const argv = [...(mongod.command ?? []), ...(mongod.args ?? [])];
	const argAfter = (flag: string) => argv[argv.indexOf(flag) + 1];

	it("runs three members of a pinned mongo image with --replSet rs0, --auth and a keyFile, on volumeClaimTemplates", () => {
		expect(mongodb.spec!.replicas).toBe(3);
		expect(mongod.image).toMatch(/^mongo:\d+\.\d+\.\d+$/);
		// At least the 7.0 patch that closes CVE-2025-14847 (an unauthenticated client reads server memory), CVE-2026-6914 and CVE-2026-9740 (an unauthenticated client crashes mongod).
		const [major, minor, patch] = mongod.image!.slice("mongo:".length).split(".").map(Number);
		expect(major > 7 || (major === 7 && (minor > 0 || patch >= 35))).toBe(true);
		// And no zlib on the wire, where that disclosure was.
		expect(argAfter("--networkMessageCompressors").split(",")).not.toContain("zlib");
		expect(argv[0]).toBe("mongod");
		expect(argAfter("--replSet")).toBe("rs0");
		expect(argv).toEqual(expect.arrayContaining(["--auth", "--bind_ip_all", "--keyFile"]));
		expect(mongodb.spec!.volumeClaimTemplates?.length).toBeGreaterThan(0);
		expect(mongod.volumeMounts?.find(m => m.mountPath === "/data/db")?.name).toBe("data");
		expect(spec.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 999, fsGroup: 999 });
	});

	it("reads the keyFile from the Secret, copied owner-only (mongod refuses a group-readable one) into a memory volume", () => {
		const keyFile = argAfter("--keyFile");
		const mount = mongod.volumeMounts?.find(m => keyFile.startsWith(`${m.mountPath}/`));
		expect(spec.volumes?.find(v => v.name === mount?.name)?.emptyDir).toEqual(expect.objectContaining({ medium: "Memory" }));
		const copier = (spec.initContainers ?? []).find(c => c.volumeMounts?.some(m => m.name === mount?.name));
		const secretVolumes = (spec.volumes ?? []).filter(v => v.secret && copier?.volumeMounts?.some(m => m.name === v.name));
		expect(secretVolumes.map(v => [v.secret!.secretName, v.secret!.items?.map(i => i.key)])).toEqual([[SECRET, ["mongodb-keyfile"]]]);
		const script = [...(copier?.command ?? []), ...(copier?.args ?? [])].join(" ");
		expect(script).toContain(keyFile);
		expect(script).toMatch(/chmod 0?400 /);
	});

	it("is behind a headless Service that publishes not-ready members (they must resolve each other before the set exists)", () => {
		const service = get("v1", "Service", mongodb.spec!.serviceName!);
		expect(service.metadata.name).toBe("mongodb");
		expect([service.spec!.clusterIP, service.spec!.publishNotReadyAddresses, selects(service.spec!.selector, mongodb)]).toEqual(["None", true, true]);
		expect(service.spec!.ports!.map(p => p.port)).toContain(27017);
		expect(mongodb.spec!.podManagementPolicy).toBe("Parallel");
	});

	it("is ready only as PRIMARY or SECONDARY, and live while it listens", () => {
		expect(mongod.readinessProbe?.exec?.command.join(" ")).toMatch(/isWritablePrimary \|\| h\.secondary/);
		expect(mongod.livenessProbe?.tcpSocket?.port).toBe("mongodb");
	});

	it("has a Job that runs the init script with the keyFile and the users' credentials from the Secret", () => {
		const job = get("batch/v1", "Job", "mongodb-init");
		const [container] = podSpec(job).containers;
		expect(container.image).toBe(mongod.image);
		const scriptPath = container.command?.[container.command.indexOf("--file") + 1] ?? "";
		const scriptMount = container.volumeMounts?.find(m => scriptPath.startsWith(`${m.mountPath}/`));
		expect(podSpec(job).volumes?.find(v => v.name === scriptMount?.name)?.configMap?.name).toBe("mongodb-init");
		for (const name of ["MONGO_URL", "MONGO_ROOT_USERNAME", "MONGO_ROOT_PASSWORD"]) expect(fromSecret(container, name)).toEqual({ name: SECRET, key: name });
		expect(secretKeysOf(job)).toEqual(["MONGO_ROOT_PASSWORD", "MONGO_ROOT_USERNAME", "MONGO_URL", "mongodb-keyfile"]);
		const script = configMapText("mongodb-init", "init.js");
		const keyMount = container.volumeMounts?.find(m => script.includes(`"${m.mountPath}/mongodb-keyfile"`));
		expect(podSpec(job).volumes?.find(v => v.name === keyMount?.name)?.secret?.items?.map(i => i.key)).toEqual(["mongodb-keyfile"]);
		// It deletes itself after a while, so that the next apply runs it again (it is idempotent).
		expect(job.spec).toMatchObject({ ttlSecondsAfterFinished: expect.any(Number) });
	});
});

/**
 * The init script against a fake mongosh: members that answer like mongod (replSetGetStatus,
 * replSetInitiate, hello, usersInfo, createUser). mongosh's runCommand throws a server's refusal;
 * the script must not depend on it, so both behaviours run.
 */
describe.each([
	["throws", true],
	["returns", false]
])("k8s/30-mongodb.yaml init.js (runCommand %s a server's refusal)", (_how, throwsRefusals) => {
	const KEYFILE = "c2VjcmV0+a2V5/\nMTIz==\n";
	const KEY = "c2VjcmV0+a2V5/MTIz==";
	const APP_URL = `mongodb://app:app%40pass@${MONGO_MEMBERS.join(",")}/settlement?replicaSet=rs0&authSource=admin`;
	const ENV = { MONGO_ROOT_USERNAME: "root", MONGO_ROOT_PASSWORD: "rootpass", MONGO_URL: APP_URL };

	interface World {
		/** Per member: answers at all, and holds a replica set config. */
		members: Record<string, { up: boolean; config: boolean }>;
		/** After how many sleeps a member that is down comes up. */
		upAfter?: Record<string, number>;
		users: Map<string, { pwd: string; roles: unknown }>;
		calls: string[];
		uris: string[];
		sleeps: number;
	}

	const world = (up: boolean, config: boolean): World => ({
		members: Object.fromEntries(MONGO_MEMBERS.map(host => [host, { up, config }])),
		users: new Map(),
		calls: [],
		uris: [],
		sleeps: 0
	});

	function run(state: World, env: Record<string, string> = ENV): void {
		const refusal = (code: number, message: string) => {
			if (throwsRefusals) throw Object.assign(new Error(message), { code });
			return { ok: 0, code, errmsg: message };
		};
		class Mongo {
			private readonly hosts: string[];
			private readonly direct: boolean;

			constructor(uri: string) {
				state.uris.push(uri);
				const match = /^mongodb:\/\/([^:]+):([^@]+)@([^/]+)\/\?(.*)$/.exec(uri);
				if (!match) throw new Error(`unexpected URI ${uri}`);
				const options = new URLSearchParams(match[4]);
				if (match[1] !== "__system" || decodeURIComponent(match[2]) !== KEY || options.get("authSource") !== "local")
					throw Object.assign(new Error("Authentication failed."), { code: 18 });
				this.hosts = match[3].split(",");
				this.direct = options.get("directConnection") === "true";
			}

			getDB(name: string) {
				return { runCommand: (cmd: Record<string, unknown>) => this.command(name, cmd) };
			}

			close(): void {}

			private command(db: string, cmd: Record<string, unknown>): unknown {
				expect(db).toBe("admin");
				const name = Object.keys(cmd)[0];
				if (this.direct) {
					const host = this.hosts[0];
					const member = state.members[host];
					if (!member.up) throw new Error(`connect ECONNREFUSED ${host}`);
					if (name === "replSetGetStatus") return member.config ? { ok: 1, set: "rs0", members: [] } : refusal(94, "no replset config has been received");
					if (name === "replSetInitiate") {
						state.calls.push(`replSetInitiate on ${host}: ${JSON.stringify(cmd.replSetInitiate)}`);
						if (member.config) return refusal(23, "already initialized");
						for (const other of Object.values(state.members)) if (other.up) other.config = true;
						return { ok: 1 };
					}
				} else {
					if (!Object.values(state.members).some(m => m.up && m.config)) throw new Error("Server selection timed out after 5000 ms");
					if (name === "hello") return { ok: 1, isWritablePrimary: true };
					if (name === "usersInfo") {
						const { user } = cmd.usersInfo as { user: string };
						return { ok: 1, users: state.users.has(user) ? [{ user }] : [] };
					}
					if (name === "createUser") {
						state.calls.push(`createUser ${String(cmd.createUser)} ${JSON.stringify(cmd.roles)} ${JSON.stringify(cmd.writeConcern)}`);
						state.users.set(String(cmd.createUser), { pwd: String(cmd.pwd), roles: cmd.roles });
						return { ok: 1 };
					}
					if (name === "replSetGetStatus") return { ok: 1, members: MONGO_MEMBERS.map(host => ({ name: host, stateStr: "SECONDARY" })) };
				}
				throw new Error(`the fake has no ${name} for this connection`);
			}
		}
		const context = vm.createContext({
			Mongo,
			print: () => undefined,
			sleep: () => {
				state.sleeps++;
				for (const [host, after] of Object.entries(state.upAfter ?? {})) if (state.sleeps >= after) state.members[host].up = true;
			},
			require: (module: string) => {
				if (module !== "fs") throw new Error(`init.js requires ${module}`);
				return { readFileSync: (file: string) => (file === "/etc/mongodb-keyfile/mongodb-keyfile" ? KEYFILE : fs.readFileSync("/nonexistent")) };
			},
			process: { env },
			URLSearchParams
		});
		vm.runInContext(configMapText("mongodb-init", "init.js"), context, { filename: "init.js" });
	}

	it("initiates a new set once, on the first member, with the three members, then creates the root and the app user", () => {
		const state = world(true, false);
		run(state);
		expect(state.calls).toEqual([
			`replSetInitiate on ${MONGO_MEMBERS[0]}: ${JSON.stringify({ _id: "rs0", members: MONGO_MEMBERS.map((host, _id) => ({ _id, host })) })}`,
			`createUser root [{"role":"root","db":"admin"}] {"w":"majority","wtimeout":30000}`,
			`createUser app [{"role":"readWrite","db":"settlement"}] {"w":"majority","wtimeout":30000}`
		]);
		// The password as MONGO_URL encodes it, decoded.
		expect(state.users.get("app")?.pwd).toBe("app@pass");
		// Authenticated with the keyFile, whitespace removed, as __system.
		expect(state.uris.every(uri => uri.startsWith(`mongodb://__system:${encodeURIComponent(KEY)}@`))).toBe(true);
	});

	it("changes nothing when run again", () => {
		const state = world(true, false);
		run(state);
		state.calls = [];
		run(state);
		expect(state.calls).toEqual([]);
	});

	it("does not initiate when a member has lost its volume but the others hold the set (that would split it)", () => {
		const state = world(true, true);
		state.members[MONGO_MEMBERS[0]].config = false;
		state.users.set("root", { pwd: "x", roles: [] }).set("app", { pwd: "y", roles: [] });
		run(state);
		expect(state.calls).toEqual([]);
	});

	it("waits for a member that is not up yet, then initiates", () => {
		const state = world(true, false);
		state.members[MONGO_MEMBERS[2]].up = false;
		state.upAfter = { [MONGO_MEMBERS[2]]: 3 };
		run(state);
		expect(state.sleeps).toBeGreaterThanOrEqual(3);
		expect(state.calls.filter(c => c.startsWith("replSetInitiate"))).toHaveLength(1);
	});

	it("gives up, without initiating, while a member stays down", () => {
		const state = world(true, false);
		state.members[MONGO_MEMBERS[1]].up = false;
		expect(() => run(state)).toThrow(/waiting for the members: gave up/);
		expect(state.calls).toEqual([]);
	});

	it("refuses a MONGO_URL without authSource=admin before it changes anything", () => {
		const state = world(true, false);
		expect(() => run(state, { ...ENV, MONGO_URL: APP_URL.replace("&authSource=admin", "") })).toThrow(/authSource=admin/);
		expect(state.calls).toEqual([]);
	});
});

describe("k8s/ manifests: egress", () => {
	/** The egress rules of the policies that restrict a workload's connections out; null when none does (open). */
	const egressOf = (workload: K8sObject): NetworkPolicyRule[] | null => {
		const policies = networkPolicies.filter(p => p.spec!.policyTypes?.includes("Egress") && matches(p.spec!.podSelector ?? {}, podLabels(workload)));
		return policies.length ? policies.flatMap(p => p.spec!.egress ?? []) : null;
	};

	it("the gateway, which the internet reaches, may connect to NATS (4222) and the cluster DNS (53) only", () => {
		const rules = egressOf(get("apps/v1", "Deployment", "gateway"))!;
		expect(rules).not.toBeNull();
		const allowed = rules.flatMap(rule => (rule.to ?? [{ everywhere: true } as NetworkPolicyPeer]).flatMap(peer => (rule.ports ?? [{}]).map(port => ({ peer, port }))));
		const nats = allowed.filter(({ peer }) => !peer.namespaceSelector && peer.podSelector && workloadsAdmittedBy(peer).includes("nats"));
		expect(nats.map(({ port }) => port)).toEqual([{ protocol: "TCP", port: 4222 }]);
		expect(workloadsAdmittedBy(nats[0].peer)).toEqual(["nats"]);
		const dns = allowed.filter(({ peer }) => peer.namespaceSelector?.matchLabels?.["kubernetes.io/metadata.name"] === "kube-system" && peer.podSelector?.matchLabels?.["k8s-app"] === "kube-dns");
		expect(dns.map(({ port }) => port)).toEqual([
			{ protocol: "UDP", port: 53 },
			{ protocol: "TCP", port: 53 }
		]);
		expect(allowed).toHaveLength(nats.length + dns.length);
	});

	it("the other groups' egress stays open (the RPC, webhook receivers), as docs/security.md says", () => {
		for (const name of ["intake", "verifier", "owners"]) expect([name, egressOf(get("apps/v1", "Deployment", name))]).toEqual([name, null]);
	});
});

describe("k8s/ manifests: the app reaches NATS and MongoDB with credentials from the Secret", () => {
	it.each(deployments.map(d => [d.metadata.name, d] as const))("%s: TRANSPORTER from the ConfigMap, NATS_USER its bus group, its group's NATS_PASSWORD from the Secret", (_name, deployment) => {
		const container = podSpec(deployment).containers[0];
		const configMaps = (container.envFrom ?? []).flatMap(source => (source.configMapRef ? [get("v1", "ConfigMap", source.configMapRef.name)] : []));
		const data = Object.assign({}, ...configMaps.map(c => c.data)) as Record<string, string>;
		expect(data.TRANSPORTER).toBe(`nats://nats.${NAMESPACE}.svc.cluster.local:4222`);
		get("v1", "Service", "nats");
		const group = busGroupServing(envValue(container, "SERVICES")!.split(","));
		expect([envValue(container, "NATS_USER"), fromSecret(container, "NATS_PASSWORD")]).toEqual([group, { name: SECRET, key: `NATS_PASSWORD_${group.toUpperCase()}` }]);
		expect(data.SOLANA_RPC_URL).toBe("https://api.devnet.solana.com");
		expect(data.TRUST_PROXY).toBe("true");
		// Never weakened in the manifests (the app refuses a weak MONGO_URL unless this is true).
		expect(variablesSet(container).map(v => v.name)).not.toContain("MONGO_ALLOW_WEAK_DURABILITY");
	});

	it("gives MONGO_URL to the owners only, from the Secret, never from a ConfigMap", () => {
		const withMongo = deployments.filter(d => variablesSet(podSpec(d).containers[0]).some(v => v.name === "MONGO_URL"));
		expect(withMongo.map(d => d.metadata.name)).toEqual(["owners"]);
		expect(fromSecret(podSpec(withMongo[0]).containers[0], "MONGO_URL")).toEqual({ name: SECRET, key: "MONGO_URL" });
		for (const configMap of objects.filter(o => o.kind === "ConfigMap")) expect([label(configMap), Object.keys(configMap.data ?? {})]).not.toContainEqual("MONGO_URL");
	});

	it("gives each Deployment only the Secret keys it needs", () => {
		expect(Object.fromEntries(deployments.map(d => [d.metadata.name, secretKeysOf(d)]))).toEqual({
			gateway: ["BUS_PUBLIC_KEYS", "BUS_SIGNING_KEY_GATEWAY", "METRICS_API_KEY", "NATS_PASSWORD_GATEWAY", "WORKER_API_KEYS"],
			intake: ["BUS_PUBLIC_KEYS", "BUS_SIGNING_KEY_INTAKE", "NATS_PASSWORD_INTAKE", "WEBHOOK_SECRETS_KEY", "WEBHOOK_SECRETS_KEY_NEXT", "WORKER_API_KEYS"],
			verifier: ["BUS_PUBLIC_KEYS", "BUS_SIGNING_KEY_VERIFIER", "NATS_PASSWORD_VERIFIER"],
			owners: ["BUS_PUBLIC_KEYS", "BUS_SIGNING_KEY_OWNERS", "MONGO_URL", "NATS_PASSWORD_OWNERS", "WEBHOOK_SECRETS_KEY", "WEBHOOK_SECRETS_KEY_NEXT", "WORKER_API_KEYS", "node-authority-keypair.json"]
		});
		const owners = get("apps/v1", "Deployment", "owners");
		const keypairPath = envValue(podSpec(owners).containers[0], "NODE_AUTHORITY_KEYPAIR_PATH");
		const mount = podSpec(owners).containers[0].volumeMounts?.find(m => keypairPath?.startsWith(`${m.mountPath}/`));
		expect(podSpec(owners).volumes?.find(v => v.name === mount?.name)?.secret?.items?.map(i => i.key)).toEqual(["node-authority-keypair.json"]);
	});

	it("shapes the Secret's MONGO_URL for the replica set: the three members, replicaSet=rs0, authSource=admin, nothing weakened", () => {
		const url = get("v1", "Secret", SECRET).stringData!.MONGO_URL;
		expect(mongoUrlProblems(url)).toEqual([]);
		expect(mongoDatabaseName(url)).toBe("settlement");
	});

	it("the MONGO_URL check refuses a standalone, a missing member and weakened durability (so a pass means something)", () => {
		const good = get("v1", "Secret", SECRET).stringData!.MONGO_URL;
		expect(mongoUrlProblems(`mongodb://u:p@mongodb.${NAMESPACE}.svc.cluster.local:27017/settlement`)).not.toEqual([]);
		expect(mongoUrlProblems(good.replace(`,${MONGO_MEMBERS[2]}`, ""))).toEqual([expect.stringMatching(/^members/)]);
		expect(mongoUrlProblems(good.replace("&authSource=admin", ""))).toEqual(["authSource is not admin"]);
		for (const weak of ["w=1", "journal=false", "retryWrites=false", "readPreference=secondaryPreferred"])
			expect(mongoUrlProblems(`${good}&${weak}`)).toEqual([expect.stringMatching(new RegExp(`^${weak}`, "i"))]);
	});
});

describe("k8s/ manifests: the gateway's exposure", () => {
	const gateway = get("apps/v1", "Deployment", "gateway");
	const ingress = get("networking.k8s.io/v1", "Ingress", "gateway");
	// The Cranker routes are lib/cranker-call.ts's table, spread into WORKER_ROUTES.
	const workerRoutes = [...routesOf("WORKER_ROUTES"), ...Object.keys(CRANKER_ROUTES), ...routesOf("WORKER_STREAM_ROUTES")];
	const publicRoutes = [...routesOf("PUBLIC_ROUTES"), ...routesOf("PUBLIC_STREAM_ROUTES"), ...routesOf("HEALTH_ROUTES")];

	it("the public Ingress serves its every host over TLS, and redirects plain HTTP", () => {
		const hosts = ingress.spec!.rules!.map(rule => rule.host);
		expect(ingress.spec!.tls).toEqual([{ hosts, secretName: "settlement-tls" }]);
		expect(ingress.metadata.annotations?.["nginx.ingress.kubernetes.io/force-ssl-redirect"]).toBe("true");
	});

	it.each(["gateway", "gateway-internal"])("has the ClusterIP Service %s (80 → 3000) on the gateway pods", name => {
		const service = get("v1", "Service", name);
		expect(selects(service.spec!.selector, gateway)).toBe(true);
		expect(service.spec!.type ?? "ClusterIP").toBe("ClusterIP");
		const [port] = service.spec!.ports!;
		expect(port.port).toBe(80);
		const target = typeof port.targetPort === "string" ? podSpec(gateway).containers[0].ports?.find(p => p.name === port.targetPort)?.containerPort : port.targetPort;
		expect(target).toBe(3000);
	});

	it("has one nginx Ingress, on settlement.example.com, to the Service gateway, its paths regular expressions", () => {
		expect(applied.filter(o => o.kind === "Ingress").map(label)).toEqual(["Ingress gateway"]);
		expect(ingress.spec!.ingressClassName).toBe("nginx");
		expect(ingress.metadata.annotations?.["nginx.ingress.kubernetes.io/use-regex"]).toBe("true");
		const [rule] = ingress.spec!.rules!;
		expect(rule.host).toBe("settlement.example.com");
		expect(new Set(rule.http!.paths.map(p => p.backend.service?.name))).toEqual(new Set(["gateway"]));
		expect(new Set(rule.http!.paths.map(p => p.pathType))).toEqual(new Set(["ImplementationSpecific"]));
	});

	it("reads the route tables of services/api.service.ts (the checks below are not vacuous)", () => {
		expect(workerRoutes).toEqual(expect.arrayContaining(["GET /intent-work", "PATCH /intents/:id/status", "POST /epoch/close", "GET /tin-operations/fee-work"]));
		expect(publicRoutes).toEqual(expect.arrayContaining(["POST /intents", "GET /metrics", "GET /health/ready", "GET /intents/:id/events"]));
		expect(workerRoutes).toContain("GET /events");
	});

	it("routes every public route but GET /metrics", () => {
		for (const route of publicRoutes.filter(r => r !== "GET /metrics")) expect([route, ingressRoutes(ingress, samplePath(route)).length]).toEqual([route, 1]);
	});

	it("routes no worker route and not /metrics, whatever the case or an extra segment", () => {
		// Paths, not methods: a worker route on a public route's path is reachable, the gateway refusing it without a key.
		const publicPaths = new Set(publicRoutes.map(samplePath));
		const sharedPath = workerRoutes.filter(route => publicPaths.has(samplePath(route)));
		expect(sharedPath).toEqual(["GET /intents"]);
		for (const route of workerRoutes.filter(r => !sharedPath.includes(r))) expect([route, ingressRoutes(ingress, samplePath(route))]).toEqual([route, []]);
		for (const requestPath of ["/metrics", "/METRICS", "/metrics/", "/Tin-Operations/Verification-Work", "/intents/abc123/status", "/intents/abc123/status/", "/internal/wake", "/crankers/x"])
			expect([requestPath, ingressRoutes(ingress, requestPath)]).toEqual([requestPath, []]);
	});
});

describe("k8s/ manifests: NetworkPolicies", () => {
	const gateway = get("apps/v1", "Deployment", "gateway");
	const nats = get("apps/v1", "StatefulSet", "nats");
	const mongodb = get("apps/v1", "StatefulSet", "mongodb");
	const appPods = deployments.map(d => d.metadata.name).sort();
	const peersOf = (peers: Peer[]) => peers.map(p => (p === "everyone" ? p : JSON.stringify(p)));

	it("labels the app pods consistently (name, part-of, component)", () => {
		for (const deployment of deployments)
			expect(podLabels(deployment)).toMatchObject({ ...APP_LABELS, "app.kubernetes.io/component": deployment.metadata.name });
	});

	it("denies all ingress in the namespace by default", () => {
		const defaults = networkPolicies.filter(p => Object.keys(p.spec!.podSelector?.matchLabels ?? {}).length === 0 && !p.spec!.podSelector?.matchExpressions?.length);
		expect(defaults.map(p => [p.spec!.policyTypes, p.spec!.ingress ?? []])).toEqual([[["Ingress"], []]]);
	});

	it("admits to NATS (4222) only the app pods of this namespace: a podSelector without namespaceSelector or ipBlock", () => {
		const peers = admitted(nats, 4222);
		expect(peers.length).toBeGreaterThan(0);
		for (const peer of peers) {
			expect(peer).not.toBe("everyone");
			if (peer === "everyone") continue;
			expect([JSON.stringify(peer), peer.namespaceSelector, peer.ipBlock, peer.podSelector?.matchLabels]).toEqual([JSON.stringify(peer), undefined, undefined, expect.objectContaining(APP_LABELS)]);
			expect(workloadsAdmittedBy(peer).sort()).toEqual(appPods);
		}
	});

	it("admits to the NATS routes (6222) only the NATS pods", () => {
		const peers = admitted(nats, 6222);
		expect(peers.length).toBeGreaterThan(0);
		for (const peer of peers) {
			if (peer === "everyone") throw new Error("6222 open to everyone");
			expect([peer.namespaceSelector, peer.ipBlock, workloadsAdmittedBy(peer)]).toEqual([undefined, undefined, ["nats"]]);
		}
	});

	it("admits to MongoDB (27017) only the owners, the init Job and the members, from this namespace", () => {
		const peers = admitted(mongodb, 27017);
		const reached = new Set<string>();
		for (const peer of peers) {
			if (peer === "everyone") throw new Error("27017 open to everyone");
			expect([peer.namespaceSelector, peer.ipBlock]).toEqual([undefined, undefined]);
			for (const name of workloadsAdmittedBy(peer)) reached.add(name);
		}
		expect([...reached].sort()).toEqual(["mongodb", "mongodb-init", "owners"]);
	});

	it("admits the Ingress controller's namespace to the gateway (3000), and to nothing else", () => {
		const fromIngress = (peer: Peer) => peer !== "everyone" && !!peer.namespaceSelector && matches(peer.namespaceSelector, INGRESS_NAMESPACE) && !peer.podSelector;
		expect(admitted(gateway, 3000).filter(fromIngress)).toHaveLength(1);
		for (const workload of workloads.filter(w => w !== gateway))
			for (const port of containerPorts(workload)) expect([label(workload), port, peersOf(admitted(workload, port).filter(fromIngress))]).toEqual([label(workload), port, []]);
	});

	it("admits nothing from outside the namespace to any pod but the gateway, and nothing at all to intake, verifier and owners", () => {
		for (const workload of workloads.filter(w => w !== gateway))
			for (const port of containerPorts(workload)) {
				const outside = admitted(workload, port).filter(peer => peer === "everyone" || peer.namespaceSelector || peer.ipBlock);
				expect([label(workload), port, peersOf(outside)]).toEqual([label(workload), port, []]);
			}
		for (const name of ["intake", "verifier", "owners"]) {
			const deployment = get("apps/v1", "Deployment", name);
			expect([name, peersOf(admitted(deployment, 3000))]).toEqual([name, []]);
		}
	});

	it("the policy helpers see an open rule and a foreign namespace (so the checks above are not vacuous)", () => {
		const open: K8sObject = { apiVersion: "networking.k8s.io/v1", kind: "NetworkPolicy", metadata: { name: "x" }, spec: { podSelector: {}, ingress: [{}] } };
		networkPolicies.push(open);
		try {
			expect(admitted(nats, 4222)).toContain("everyone");
		} finally {
			networkPolicies.pop();
		}
		expect(matches({ matchLabels: INGRESS_NAMESPACE }, { "kubernetes.io/metadata.name": "default" })).toBe(false);
		// A rule that names the probes' port admits to it.
		const named: K8sObject = { apiVersion: "networking.k8s.io/v1", kind: "NetworkPolicy", metadata: { name: "y" }, spec: { podSelector: {}, ingress: [{ ports: [{ port: "health" }] }] } };
		networkPolicies.push(named);
		try {
			expect(admitted(gateway, 3001)).toContain("everyone");
			expect(admitted(gateway, 3000)).not.toContain("everyone");
		} finally {
			networkPolicies.pop();
		}
	});
});

describe("k8s/ manifests: Pod Security restricted", () => {
	it("labels the namespace to enforce, audit and warn on the restricted profile", () => {
		expect(get("v1", "Namespace", NAMESPACE).metadata.labels).toMatchObject({
			"pod-security.kubernetes.io/enforce": "restricted",
			"pod-security.kubernetes.io/audit": "restricted",
			"pod-security.kubernetes.io/warn": "restricted"
		});
	});

	it("finds the workloads (Deployments, StatefulSets, the Job)", () => {
		expect(workloads.map(label).sort()).toEqual(
			["Deployment gateway", "Deployment intake", "Deployment owners", "Deployment verifier", "Job mongodb-init", "StatefulSet mongodb", "StatefulSet nats"].sort()
		);
	});

	describe.each(workloads.map(w => [label(w), w] as const))("%s", (_name, workload) => {
		const spec = podSpec(workload);

		it("runs as non-root with the RuntimeDefault seccomp profile, no host namespaces, no service account token", () => {
			expect(spec.securityContext).toMatchObject({ runAsNonRoot: true, seccompProfile: { type: "RuntimeDefault" } });
			expect(spec.securityContext?.runAsUser).toBeGreaterThan(0);
			expect([spec.hostNetwork, spec.hostPID, spec.hostIPC]).toEqual([undefined, undefined, undefined]);
			expect(spec.automountServiceAccountToken).toBe(false);
		});

		it("uses only the volume types restricted allows (no hostPath)", () => {
			const allowed = ["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"];
			for (const volume of spec.volumes ?? []) {
				const types = Object.keys(volume).filter(key => key !== "name");
				expect([volume.name, types.every(type => allowed.includes(type))]).toEqual([volume.name, true]);
			}
		});

		it("gives every container no privilege escalation, no capabilities, a read-only root, no host port, a non-root user", () => {
			for (const container of allContainers(workload)) {
				expect([container.name, container.securityContext]).toEqual([
					container.name,
					expect.objectContaining({ allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ["ALL"] } })
				]);
				expect(container.securityContext?.privileged).toBeUndefined();
				expect(container.securityContext?.runAsUser ?? spec.securityContext?.runAsUser).not.toBe(0);
				expect((container.ports ?? []).filter(p => p.hostPort !== undefined)).toEqual([]);
			}
		});

		it("pins every image to an exact version (no latest, no bare name)", () => {
			for (const container of allContainers(workload)) expect([container.name, container.image]).toEqual([container.name, expect.stringMatching(/^[a-z0-9./-]+(:\d+\.\d+\.\d+[\w.-]*|@sha256:[0-9a-f]{64})$/)]);
		});

		it("gives every container resource requests and limits", () => {
			for (const container of allContainers(workload)) {
				expect([container.name, Object.keys(container.resources?.requests ?? {}).sort()]).toEqual([container.name, ["cpu", "memory"]]);
				expect([container.name, Object.keys(container.resources?.limits ?? {}).sort()]).toEqual([container.name, ["cpu", "memory"]]);
			}
		});

		it("refers only to Secret and ConfigMap keys that k8s/ defines", () => {
			const keysOf = (kind: string, name: string) => {
				const object = get("v1", kind, name);
				return [...Object.keys(object.data ?? {}), ...Object.keys(object.stringData ?? {})];
			};
			for (const container of allContainers(workload))
				for (const variable of container.env ?? []) {
					const ref = variable.valueFrom?.secretKeyRef ?? variable.valueFrom?.configMapKeyRef;
					if (ref) expect(keysOf(variable.valueFrom?.secretKeyRef ? "Secret" : "ConfigMap", ref.name)).toContain(ref.key);
				}
			for (const volume of spec.volumes ?? []) {
				if (volume.secret) for (const item of volume.secret.items ?? []) expect(keysOf("Secret", volume.secret.secretName)).toContain(item.key);
				if (volume.configMap) get("v1", "ConfigMap", volume.configMap.name);
			}
		});
	});

	it("the image check refuses latest and an untagged image (so a pass means something)", () => {
		const pinned = /^[a-z0-9./-]+(:\d+\.\d+\.\d+[\w.-]*|@sha256:[0-9a-f]{64})$/;
		expect(["mongo:latest", "mongo", "mongo:7", "nats:2.10-alpine"].filter(image => pinned.test(image))).toEqual([]);
		expect(["mongo:7.0.35", "nats:2.10.22-alpine", IMAGE].every(image => pinned.test(image))).toBe(true);
	});
});

describe("k8s/ manifests: every Deployment", () => {
	it("finds the four Deployments", () => {
		expect(deployments.map(d => d.metadata.name).sort()).toEqual(["gateway", "intake", "owners", "verifier"]);
	});

	describe.each(deployments.map(d => [d.metadata.name, d] as const))("%s", (_name, deployment) => {
		const spec = podSpec(deployment);

		it("gives every container readiness and liveness probes", () => {
			for (const container of allContainers(deployment)) {
				expect(container.readinessProbe).toBeDefined();
				expect(container.livenessProbe).toBeDefined();
			}
		});

		it("probes GET /health/ready and /health/live on the HEALTH_PORT container port (services/health.ts), apart from PORT's connections", () => {
			const [container] = spec.containers;
			expect(configMapText("settlement-config", "HEALTH_PORT")).toBe("3001");
			for (const probe of [container.readinessProbe, container.livenessProbe]) {
				const port = container.ports?.find(p => p.name === probe?.httpGet?.port || p.containerPort === probe?.httpGet?.port);
				expect(port?.containerPort).toBe(3001);
			}
			expect(container.readinessProbe?.httpGet?.path).toBe("/health/ready");
			expect(container.livenessProbe?.httpGet?.path).toBe("/health/live");
			// The kubelet needs no rule; no one else reaches the probes' port.
			expect(admitted(deployment, 3001)).toEqual([]);
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
	});

	it("reads the variable names from lib/config.ts (the check above is not vacuous)", () => {
		const known = variablesTheCodeReads();
		for (const name of ["PORT", "TRANSPORTER", "NATS_USER", "NATS_PASSWORD", "SERVICES", "DATA_DIR", "MONGO_URL", "WORKER_API_KEYS", "NODE_AUTHORITY_KEYPAIR_PATH", "TRUST_PROXY", "SOLANA_RPC_URL", "NODE_ENV"])
			expect(known).toContain(name);
		expect(known).not.toContain("BOGUS_VARIABLE");
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

	it("is not applied by `kubectl apply -f k8s/` (it would overwrite the real one)", () => {
		expect(applied.filter(o => o.kind === "Secret")).toEqual([]);
	});

	it("names every key the workloads read, and no other", () => {
		const read = new Set(workloads.flatMap(secretKeysOf));
		expect(Object.keys(get("v1", "Secret", SECRET).stringData ?? {}).sort()).toEqual([...read].sort());
	});

	const openssl = spawnSync("openssl", ["version"], { encoding: "utf8" }).status === 0;
	(openssl ? it : it.skip)("is made by k8s/README.md's recipe with no value on a command line, where any user of the machine sees it (a review)", () => {
		const readme = fs.readFileSync(path.join(K8S_DIR, "README.md"), "utf8");
		const recipe = [...readme.matchAll(/```bash\n([\s\S]*?)```/g)].map(block => block[1]).find(block => block.includes("create secret generic"))!;
		const dir = fs.mkdtempSync(path.join(os.tmpdir(), "secret-recipe-"));
		try {
			// kubectl and solana-keygen stand-ins: each command line is recorded, as /proc/<pid>/cmdline shows it.
			const bin = path.join(dir, "bin");
			fs.mkdirSync(bin);
			const record = `#!/bin/sh\nprintf '%s\\n' "$0 $*" >> "${dir}/command-lines"\n`;
			fs.writeFileSync(path.join(bin, "kubectl"), `${record}cat > /dev/null\n`, { mode: 0o755 });
			fs.writeFileSync(path.join(bin, "solana-keygen"), `${record}printf '[%s]' "$(seq -s, 1 64)" > "$3"\n`, { mode: 0o755 });
			const run = spawnSync("bash", ["-euo", "pipefail", "-c", recipe], { cwd: dir, encoding: "utf8", env: { ...process.env, PATH: `${bin}:${process.env.PATH}` } });
			expect([run.status, run.stderr]).toEqual([0, ""]);
			const commandLines = fs.readFileSync(path.join(dir, "command-lines"), "utf8");
			expect(commandLines).toContain("create secret generic settlement-secrets");
			expect(commandLines).not.toMatch(/--from-literal=\w+=\S{16}/);
			const values = fs.readdirSync(path.join(dir, "secrets")).map(name => fs.readFileSync(path.join(dir, "secrets", name), "utf8"));
			expect(values.length).toBeGreaterThanOrEqual(10);
			for (const value of values.filter(v => v !== "root")) {
				expect(value).not.toMatch(/\n$/);
				expect(commandLines).not.toContain(value);
			}
		} finally {
			fs.rmSync(dir, { recursive: true, force: true });
		}
	});
});
