# chainsync in a container: a static binary (CGO_ENABLED=0, pure-Go DNS
# resolver) on an empty base image, running as a non-root user.
#
#   docker build -t chainsync:0.1.0 .
#   docker run --rm chainsync:0.1.0 version
#
# The default image holds nothing but /chainsync (and CA roots for
# certificates checked against the system's trust store). A task needs its
# own tools: build your task image FROM yours and copy the binary in,
#   COPY --from=chainsync:0.1.0 /chainsync /usr/local/bin/chainsync
# The "example" target does that with busybox, for deploy/kubernetes:
#   docker build --target example -t chainsync:example .

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod ./
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/chainsync ./cmd/chainsync \
 && /out/chainsync version

# A small image with a shell, for example tasks (deploy/kubernetes).
FROM busybox:1.37 AS example
COPY --from=build /out/chainsync /usr/local/bin/chainsync
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/chainsync"]
CMD ["--help"]

# The default (last) stage: the binary alone.
FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/chainsync /chainsync
# nobody-style uid/gid; no /etc/passwd is needed for a numeric user.
USER 65532:65532
EXPOSE 7000
ENTRYPOINT ["/chainsync"]
CMD ["--help"]
