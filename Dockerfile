# syntax=docker/dockerfile:1
# Convoy image: static Go build -> debian:12-slim with the mariadb client
# (used by the convoy-init / schema one-shots in docker-compose.yml).

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/convoy ./cmd/convoy

FROM debian:12-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends mariadb-client ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin convoy
COPY --from=build /out/convoy /usr/local/bin/convoy
COPY config/docker.yaml /etc/convoy/docker.yaml
COPY schema/ /usr/share/convoy/schema/
USER convoy
# 3307 MySQL protocol, 9104 Prometheus metrics
EXPOSE 3307 9104
ENTRYPOINT ["/usr/local/bin/convoy"]
CMD ["serve", "--config", "/etc/convoy/docker.yaml"]
