# The fulcrum binary in a small image: built static in a Go image, run as a
# non-root user on a distroless base (no shell, no package manager).
#
#   docker build -t fulcrum --build-arg VERSION=$(git describe --tags --always) .
#   docker run --rm fulcrum version
#   docker run --rm -p 8080:8080 -v "$PWD/gateway.yaml:/etc/fulcrum/gateway.yaml:ro" \
#       fulcrum gateway --config /etc/fulcrum/gateway.yaml
#
# Inside a container, listen on 0.0.0.0 (the defaults are 127.0.0.1), and
# give `fulcrum flow serve` a volume for its SQLite file or a --db URL.
# CI does not build this image.

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The build context has no .git, so the version comes from VERSION.
ARG VERSION=""
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/fulcrum ./cmd/fulcrum

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/fulcrum /usr/local/bin/fulcrum
USER nonroot:nonroot
WORKDIR /home/nonroot
EXPOSE 8080 9901 7070 7300
ENTRYPOINT ["/usr/local/bin/fulcrum"]
CMD ["--help"]
