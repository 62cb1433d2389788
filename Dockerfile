# kartograf container image.
#   docker build -t ghcr.io/kartograf/kartograf:latest .
# Multi-stage: a Rust builder, then a distroless runtime running as uid/gid 65532.

FROM rust:1.95-slim-bookworm AS builder
WORKDIR /src

# Dependency layer, cached until Cargo.toml, Cargo.lock, build.rs, proto/ or catalog/ change:
# build the real manifest against stub sources, so only dependencies (and build.rs) compile.
# Every target Cargo.toml declares needs a file, even though only the binary is built.
COPY Cargo.toml Cargo.lock build.rs ./
COPY proto proto
COPY catalog catalog
RUN mkdir -p src benches tests/engine tests/service tests/conformance \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs benches/resolve.rs benches/service.rs benches/scale.rs benches/aggregator.rs benches/e2e.rs benches/karmada.rs benches/gangs.rs benches/doors.rs benches/patch.rs \
        tests/engine/main.rs tests/service/main.rs tests/conformance/main.rs \
    && cargo build --release --locked --bin kartograf \
    && rm -rf src

# The real sources. `touch` makes them newer than the stubs whatever mtimes COPY kept.
COPY src src
RUN touch src/main.rs src/lib.rs \
    && cargo build --release --locked --bin kartograf \
    && cp target/release/kartograf /kartograf

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /kartograf /usr/local/bin/kartograf
USER 65532:65532
# 50051: gRPC API and grpc.health.v1; 9090: admin (metrics).
EXPOSE 50051 9090
ENTRYPOINT ["kartograf", "serve"]
