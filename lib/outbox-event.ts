/**
 * A change to announce, written in the same atomic write as the document it describes (a
 * transactional outbox): no change without its event, no event without its change. A module of
 * its own so that the domain modules the SDK's declarations include name it without the store port.
 */
export interface OutboxEvent {
	/** The document the event is about. */
	subject: string;
	type: string;
	/** When the change happened (ISO time): what retention prunes by. */
	at: string;
	data: Record<string, unknown>;
}
