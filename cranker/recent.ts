/** Sets `key` as the newest entry of `map`, dropping the oldest one when `max` are already kept. */
export function rememberLatest<K, V>(map: Map<K, V>, key: K, value: V, max: number): void {
	map.delete(key);
	if (map.size >= max) map.delete(map.keys().next().value!);
	map.set(key, value);
}
