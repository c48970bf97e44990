/**
 * The floor of a list read in bench:reads: plain node:http answering bytes it already holds. A
 * `PUT /answer` stores a body; every `GET /answer` sends it. Timed with the same client as the
 * service, it is what answering the same bytes costs on the same machine, with nothing read or
 * built, so the service's list figures can be given as ratios to it.
 *
 *   node dist/bench/bare-answer.js        # PORT from the environment
 */
import http from "node:http";

let answer = Buffer.from("[]");

http
	.createServer((req, res) => {
		if (req.url === "/health/ready") return res.writeHead(200).end();
		if (req.url !== "/answer") return res.writeHead(404).end();
		if (req.method === "GET") return res.writeHead(200, { "content-type": "application/json; charset=utf-8", "content-length": answer.length }).end(answer);
		const chunks: Buffer[] = [];
		req.on("data", (chunk: Buffer) => chunks.push(chunk));
		req.on("end", () => {
			answer = Buffer.concat(chunks);
			res.writeHead(204).end();
		});
	})
	.listen(Number(process.env.PORT), "127.0.0.1");
