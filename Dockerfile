# Beidou MCP server. Build: docker build -t beidou .
# Run:   docker run -p 7777:7777 -v beidou-data:/data beidou
# The admin token is generated into the volume on first start: /data/admin.token.

# ---- build: compile TypeScript, build the dashboard, and better-sqlite3's native module ----
FROM node:20-slim AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 make g++ \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json ./
# npm ci when the lockfile satisfies this npm; npm install (still guided by it) otherwise.
RUN npm ci --no-audit --no-fund || npm install --no-audit --no-fund
COPY tsconfig.json vite.config.ts ./
COPY src ./src
COPY web ./web
# The server (tsc) and the dashboard page (vite: web/ -> dist/web/), then drop the dev dependencies.
RUN npm run build && npm prune --omit=dev --no-audit --no-fund

# ---- runtime: production dependencies, the compiled code and the built dashboard (dist/), skills, schemas ----
FROM node:20-slim
# Bound off loopback (0.0.0.0, to be reached through a published port), the server starts only
# with the names it answers to: localhost (the published port, from the Docker host) here. Reached
# by another name, set yours: -e BEIDOU_ALLOWED_HOSTS=beidou.internal,beidou.internal:7777.
ENV NODE_ENV=production \
    BEIDOU_HOST=0.0.0.0 \
    BEIDOU_ALLOWED_HOSTS=localhost \
    BEIDOU_HOME=/data
WORKDIR /app
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY skills ./skills
COPY schemas ./schemas
# The image's unprivileged "node" user owns the data volume, and it alone may enter it (0700,
# as the server makes a home of its own; it would set an older, wider one so at start).
RUN mkdir -p /data && chown node:node /data && chmod 0700 /data
USER node
VOLUME /data
EXPOSE 7777
# node:20-slim has no curl: probe the unauthenticated liveness route with Node's fetch
# (/api/health/live is 200 on every replica; /api/health is 503 on a standby, for load balancers).
HEALTHCHECK --interval=30s --timeout=5s --start-period=15s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.BEIDOU_PORT || 7777) + '/api/health/live').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
CMD ["node", "dist/cli/main.js", "serve"]
