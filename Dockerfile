# syntax=docker/dockerfile:1
# kausality-stream container image.
#   docker build -t kausality-stream .
#   docker run --rm kausality-stream --help
# Without arguments the binary runs `serve` with the embedded default pipeline, which listens
# on 127.0.0.1 only: in a container, pass a pipeline that listens on 0.0.0.0, e.g.
#   docker run -v $PWD/my.toml:/etc/kausality-stream/pipeline.toml:ro kausality-stream \
#     serve --pipeline /etc/kausality-stream/pipeline.toml

# ---------------------------------------------------------------- build
FROM rust:1-bookworm AS builder
# Native libraries for crates that link C code: librdkafka (built from source by the rdkafka
# crate with its configure script and make, without curl) and its compression dependencies.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      make pkg-config libssl-dev libsasl2-dev zlib1g-dev libzstd-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Cache mounts keep the crates registry and the target directory between builds; the binary
# is copied out in the same step because the cached target/ is not part of the image layer.
# --locked: build exactly the dependency versions of Cargo.lock.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked \
 && install -D -m 0755 target/release/kausality-stream /out/kausality-stream

# ---------------------------------------------------------------- runtime
FROM debian:bookworm-slim
# ca-certificates: TLS to Kafka, HTTP sinks and the API server. The other packages are the
# shared libraries the Kafka client may link dynamically (OpenSSL comes with ca-certificates).
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libsasl2-2 zlib1g libzstd1 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=builder /out/kausality-stream /usr/local/bin/kausality-stream
# State snapshot directory, writable by the runtime user (a named volume mounted here
# inherits this ownership).
RUN install -d -o 65532 -g 65532 -m 0750 /var/lib/kausality-stream
# The embedded default pipeline writes its snapshot to the working directory.
WORKDIR /var/lib/kausality-stream
# Non-root, numeric so that Kubernetes' runAsNonRoot can verify it without /etc/passwd.
USER 65532:65532
# 8080: webhook (plain HTTP, local trials); 8443: webhook (HTTPS); 9090: metrics and health.
EXPOSE 8080 8443 9090
ENTRYPOINT ["kausality-stream"]
CMD ["serve"]
