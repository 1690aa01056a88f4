// Package deploy holds no code: its directory holds what runs Apogee in
// containers, and its tests check it.
//
//   - container/Containerfile: the image, FROM scratch, built by
//     scripts/build-image.sh (the four static binaries, user 65532, /data,
//     /tmp, nothing else).
//   - kubernetes/: manifests for a controller group (a StatefulSet of 3,
//     its peers by stable DNS names), name servers, and a broker group in
//     controller mode (a StatefulSet, its Services, broker.conf in a
//     ConfigMap, a volume claim per member for the store).
//
// The tests: TestManifests (always) parses every manifest, checks the
// objects' shape and that every flag and broker.conf key the manifests
// give is one the binaries accept (their --help and the broker's key
// table, from binaries built for the test); TestImage (with
// APOGEE_IMAGE_TEST=1) builds the image with podman or docker, runs a
// broker from it, sends to it with the Go client, reads the message back
// with the image's apogee-admin, stops it with SIGTERM and finds the
// message again after a restart on the same volume. It skips, saying why,
// where no container runtime can run the image. See docs/operations.md,
// "Running in containers".
package deploy
