# syntax=docker/dockerfile:1
#
# nodetopo container images, built from the workspace. One file, two targets:
#
#   docker build --target operator -t nodetopo/nodetopo-operator:dev .
#   docker build --target agent    -t nodetopo/nodetopo-agent:dev .
#
# Both binaries come out of one cargo build (the stage is shared and cached by BuildKit).
# The runtime image is distroless "cc" (glibc + libgcc, no shell, no package manager;
# TLS is rustls, so no OpenSSL) running as the non-root user 65532. The Helm chart runs the
# agent as uid 0 with every capability dropped, for its hostPath directories only.

ARG RUST_VERSION=1.95
# One Debian release for both stages, so the binaries run on the glibc they were linked
# against: its code name names the Rust image, its number the distroless image. Override
# both together (e.g. trixie and 13); the build stage stops if they disagree.
ARG DEBIAN_RELEASE=bookworm
ARG DEBIAN_VERSION=12

FROM docker.io/library/rust:${RUST_VERSION}-${DEBIAN_RELEASE} AS build
ARG DEBIAN_RELEASE
ARG DEBIAN_VERSION
RUN major="$(cut -d. -f1 /etc/debian_version)" \
 && if [ "$major" != "$DEBIAN_VERSION" ]; then \
      echo "DEBIAN_RELEASE=$DEBIAN_RELEASE is Debian $major, but DEBIAN_VERSION=$DEBIAN_VERSION: set both to the same release" >&2; \
      exit 1; \
    fi
WORKDIR /src
# The whole workspace: the crates depend on each other by path, and Cargo.lock pins the rest.
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked -p nodetopo-operator -p nodetopo-agent-bin \
 && mkdir -p /out \
 && cp target/release/nodetopo-operator target/release/nodetopo-agent /out/

FROM gcr.io/distroless/cc-debian${DEBIAN_VERSION}:nonroot AS runtime-base
LABEL org.opencontainers.image.source="https://github.com/nodetopo/nodetopo" \
      org.opencontainers.image.licenses="Apache-2.0"
USER 65532:65532

FROM runtime-base AS operator
LABEL org.opencontainers.image.title="nodetopo-operator" \
      org.opencontainers.image.description="nodetopo cluster operator: NodeResourcePolicy -> NodeTopology specs"
COPY --from=build /out/nodetopo-operator /usr/local/bin/nodetopo-operator
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/nodetopo-operator"]

FROM runtime-base AS agent
LABEL org.opencontainers.image.title="nodetopo-agent" \
      org.opencontainers.image.description="nodetopo node agent: topology discovery, CPU allocation engine, NodeTopology status"
COPY --from=build /out/nodetopo-agent /usr/local/bin/nodetopo-agent
EXPOSE 8081
ENTRYPOINT ["/usr/local/bin/nodetopo-agent"]
CMD ["run"]
