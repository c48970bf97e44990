/**
 * The gateway's connection limits, beside Node's own (server.maxConnections): the per-client count,
 * and what to log of refusals.
 */
import type { Socket } from "node:net";
import { clientKey, type ProxyTrust } from "./client-key";

/** How many of something (connections, event streams) each client holds open; a client holding none is not kept. */
export class OpenPerClient {
	private readonly open = new Map<string, number>();

	held(client: string): number {
		return this.open.get(client) ?? 0;
	}

	add(client: string): void {
		this.open.set(client, this.held(client) + 1);
	}

	release(client: string): void {
		const left = this.held(client) - 1;
		if (left > 0) this.open.set(client, left);
		else this.open.delete(client);
	}

	/** Clients holding one or more now. */
	get clients(): number {
		return this.open.size;
	}
}

/**
 * MAX_CONNECTIONS_PER_CLIENT: how many connections one client may hold open at once, counted by
 * clientKey (an IPv4 address, an IPv6 /64). Without it one client could hold every connection the
 * process takes (MAX_CONNECTIONS), each kept a minute by keep-alive for one request. A proxy of
 * TRUST_PROXY is not counted: it carries many clients, and the per-request limits see through it.
 */
export class ConnectionsPerClient {
	private readonly open = new OpenPerClient();

	/** `max` 0: no limit. */
	constructor(
		private readonly max: number,
		private readonly proxies: ProxyTrust
	) {}

	/**
	 * Counts a new connection against its client, until it closes; false, and not counted, when the
	 * client holds `max` already.
	 */
	admit(socket: Socket): boolean {
		const peer = socket.remoteAddress;
		// No address: the socket is closed already.
		if (this.max === 0 || peer === undefined || this.proxies.isProxy(peer)) return true;
		const key = clientKey(peer);
		if (this.open.held(key) >= this.max) return false;
		this.open.add(key);
		socket.once("close", () => this.open.release(key));
		return true;
	}

	/** Clients holding a connection now. */
	get clients(): number {
		return this.open.clients;
	}
}

/**
 * What to log of connections refused by one limit: the first refusal, then at most one line a
 * `everyMs` with how many were refused since. An attacker sets the rate of refusals, not of lines.
 */
export class RefusalNotice {
	private since = 0;
	private toldAt = -Infinity;

	constructor(
		private readonly message: string,
		private readonly everyMs = 60_000
	) {}

	/** A refusal: the line to log, or null when one was logged less than `everyMs` ago. */
	refused(nowMs = performance.now()): string | null {
		this.since++;
		if (nowMs - this.toldAt < this.everyMs) return null;
		const line = this.toldAt === -Infinity ? this.message : `${this.message} (${this.since} refused in the last ${Math.round((nowMs - this.toldAt) / 1000)} s)`;
		this.toldAt = nowMs;
		this.since = 0;
		return line;
	}
}
