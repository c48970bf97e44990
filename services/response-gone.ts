/**
 * When a response is done with: it closed, or its socket did. A response queued behind another on
 * its socket (pipelined requests) emits no "close" when the socket goes, so whatever waits for its
 * "close" (the responses in flight, the open streams) would keep it, and all it holds, for good.
 * One socket listener per socket, however many responses it carries in turn or at once.
 */
import type { ServerResponse } from "node:http";
import type { Socket } from "node:net";

const waitingOnSocket = new WeakMap<Socket, Set<() => void>>();

/** How many responses on `socket` are still being served or queued (registered with onResponseGone, not gone yet). */
export function answersInProgress(socket: Socket): number {
	return waitingOnSocket.get(socket)?.size ?? 0;
}

/** Calls `gone` once, when `res` closes or its socket does (at once if the socket is gone already). */
export function onResponseGone(res: ServerResponse, gone: () => void): void {
	let called = false;
	const once = () => {
		if (called) return;
		called = true;
		waitingOnSocket.get(socket)?.delete(once);
		gone();
	};
	const socket = res.req.socket;
	if (socket.destroyed) return once();
	let waiting = waitingOnSocket.get(socket);
	if (!waiting) {
		const set = (waiting = new Set());
		waitingOnSocket.set(socket, set);
		socket.once("close", () => {
			for (const callback of set) callback();
		});
	}
	waiting.add(once);
	res.once("close", once);
}
