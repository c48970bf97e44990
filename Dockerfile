# Settlement Coordination Service: one image for every service group; SERVICES picks what a
# container runs (see k8s/). Build: docker build -t settlement-coordination-service:0.1.0 .

# --- toolchain: better-sqlite3 compiles from source when no prebuilt binary fits ---
FROM node:22.23-bookworm-slim AS toolchain
WORKDIR /app
RUN apt-get update \
	&& apt-get install -y --no-install-recommends python3 make g++ \
	&& rm -rf /var/lib/apt/lists/*
COPY package.json package-lock.json ./

# --- build: every dependency, then the TypeScript compile ---
FROM toolchain AS build
RUN npm ci --no-audit --no-fund
COPY . .
RUN npm run build

# --- production dependencies only ---
FROM toolchain AS deps
RUN npm ci --omit=dev --no-audit --no-fund

# --- runtime ---
FROM node:22.23-bookworm-slim
WORKDIR /app
ENV NODE_ENV=production DATA_DIR=/app/data PORT=3000
# Code and dependencies stay root-owned (read-only for the process); only DATA_DIR is writable.
COPY --from=build /app/package.json ./package.json
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
# The image's "node" user, by number: a runtime that enforces runAsNonRoot can only check a
# numeric user (uid 1000, which the Kubernetes manifests run as).
RUN mkdir -p /app/data && chown node:node /app/data
USER 1000:1000
EXPOSE 3000
CMD ["node", "dist/index.js"]
