# price-service as one executable in a small image, running as a non-root user.
#   docker build -t price-service .
#   docker run -d --name price-service -p 8080:8080 -v price-data:/data \
#     -e PUBLIC_URL=https://prices.example.com price-service
# The image's entrypoint is the executable, so every CLI command works the same way:
#   docker exec price-service price-service orgs create --name Acme --json
#   docker exec price-service price-service backup /data/backup-2026-11-22.db

ARG NODE_VERSION=22
ARG BUN_VERSION=1.4.5

# 1. Production dependencies exactly as package-lock.json pins them (no dev tools, no install scripts),
#    with the patches under patches/ applied (patch-package at the version package.json pins).
FROM node:${NODE_VERSION}-bookworm-slim AS deps
WORKDIR /src
COPY package.json package-lock.json ./
COPY patches ./patches
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund \
 && npx --yes patch-package@8.0.1 --error-on-fail

# 2. Bun compiles the service, its migrations and the docs assets into one file, with the build script
#    of package.json (`npm run build`, the executable CI tests), so there is one definition of the build.
FROM oven/bun:${BUN_VERSION} AS build
WORKDIR /src
COPY --from=deps /src/node_modules ./node_modules
COPY package.json bunfig.toml tsconfig.json ./
COPY drizzle ./drizzle
COPY src ./src
RUN bun run build \
 && dist/price-service --version \
 && mkdir -p /out/data

# 3. Runtime: glibc and libstdc++ only (no shell, no package manager), user nonroot (65532).
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/dist/price-service /usr/local/bin/price-service
COPY --from=build --chown=65532:65532 /out/data /data
ENV DATABASE_URL=sqlite:/data/price-service.db \
    PORT=8080 \
    PRICE_ENV=production
USER 65532:65532
VOLUME ["/data"]
EXPOSE 8080
# The executable checks itself: the image has no curl or wget.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/price-service", "healthcheck"]
# SIGTERM (docker stop) lets requests in flight finish within 8 s, then closes the database cleanly.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/price-service"]
CMD ["serve"]
