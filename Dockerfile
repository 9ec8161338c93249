# syntax=docker/dockerfile:1
#
# hookbox container image.
#   docker build -t hookbox .
#   docker run -p 8000:8000 -v hookbox-data:/data hookbox
# Manifests are mounted, one folder per kind, under /etc/hookbox: handlers in
# /etc/hookbox/handlers, sources in /etc/hookbox/sources (both empty in the
# image: nothing of the build machine's handlers/ is baked in), e.g.
#   docker run -p 8000:8000 -v hookbox-data:/data \
#     -v "$PWD/handlers:/etc/hookbox/handlers:ro" -v "$PWD/sources:/etc/hookbox/sources:ro" hookbox
# The config file is /etc/hookbox/hookbox.toml; env vars override it. /data
# belongs to uid 10001: a bind-mounted data folder must be writable by it
# (chown 10001 DIR).

FROM rust:1-bookworm AS builder
WORKDIR /src
COPY . .
# Cache mounts keep the crate registry and incremental build output between
# builds; the binary is copied out because the target dir is not in the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin hookbox \
    && cp target/release/hookbox /usr/local/bin/hookbox

FROM debian:bookworm-slim
# ca-certificates is left unpinned on purpose: it must follow Debian's security
# updates, and a pinned version disappears from the mirror when superseded.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 hookbox \
    && useradd --system --uid 10001 --gid hookbox --home-dir /data \
       --shell /usr/sbin/nologin hookbox \
    && mkdir -p /data /etc/hookbox/handlers /etc/hookbox/sources \
    && chown hookbox:hookbox /data

COPY --from=builder /usr/local/bin/hookbox /usr/local/bin/hookbox
COPY config/hookbox.toml /etc/hookbox/hookbox.toml

ENV DB_PATH=/data/events.db \
    BIND_ADDR=0.0.0.0:8000 \
    HANDLERS_DIR=/etc/hookbox/handlers \
    SOURCES_DIR=/etc/hookbox/sources \
    HOOKBOX_CONFIG=/etc/hookbox/hookbox.toml

# Relative paths in exec handler commands resolve from here.
WORKDIR /etc/hookbox
VOLUME ["/data"]
# Numeric, so runtimes can verify the user is not root (runAsNonRoot); 10001 is `hookbox`.
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["hookbox", "health", "http://127.0.0.1:8000"]
ENTRYPOINT ["hookbox"]
CMD ["serve"]
