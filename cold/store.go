package cold

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	gcaws "gocloud.dev/aws"
	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/s3blob"
	"gocloud.dev/gcerrors"
)

// Store is the object storage the cold tier needs: immutable objects written
// once and read back by byte range; listing and deleting are the
// archiver's (its catalog manifests, a rebuild of the catalog).
type Store interface {
	// PutIfAbsent creates key with data. If key already exists with the same
	// bytes it returns nil (a rerun of an archive step is idempotent); if it
	// exists with other bytes it returns an error wrapping ErrConflict and
	// leaves the object alone.
	PutIfAbsent(ctx context.Context, key string, data []byte) error
	// ReadRange returns length bytes of key starting at off (fewer only at
	// the end of the object). A missing key is an error wrapping ErrNotFound.
	ReadRange(ctx context.Context, key string, off, length int64) ([]byte, error)
	// Size is the object's length in bytes.
	Size(ctx context.Context, key string) (int64, error)
	// List calls fn with the key of every object under prefix, in key
	// order (the archiver's catalog rebuild).
	List(ctx context.Context, prefix string, fn func(key string) error) error
	// Delete removes key; a missing key is not an error (the archiver's
	// superseded catalog manifests).
	Delete(ctx context.Context, key string) error
	Close() error
}

var (
	// ErrConflict: an object exists under the key with different content.
	ErrConflict = errors.New("cold: object exists with different content")
	// ErrNotFound: no object under the key.
	ErrNotFound = errors.New("cold: object not found")
)

// digestKey is the blob metadata entry holding the SHA-256 of the object's
// bytes, so an existing object can be compared with a rerun's bytes without
// reading it back.
const digestKey = "convoy-sha256"

// OpenStore opens the store named by rawURL:
//
//	file:///var/lib/convoy/cold            (created if missing)
//	s3://bucket?endpoint=http://127.0.0.1:9000&use_path_style=true&region=us-east-1
//	    &access_key_id=...&secret_access_key=...
//
// For s3:// without access_key_id the AWS SDK's default chain applies
// (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, profile, instance role).
// endpoint, use_path_style and disable_https make MinIO, Ceph RGW and other
// S3-compatible servers work; other query parameters are those of
// gocloud.dev/aws.V2ConfigFromURLParams (region, profile, anonymous, ...).
func OpenStore(ctx context.Context, rawURL string) (Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error repeats the URL, secret included.
		return nil, errors.New("cold: store url does not parse")
	}
	var b *blob.Bucket
	switch u.Scheme {
	case "file":
		dir := u.Path
		if dir == "" {
			return nil, fmt.Errorf("cold: store url %s: file:// needs an absolute path", redact(u))
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("cold: store dir: %w", err)
		}
		b, err = fileblob.OpenBucket(dir, nil)
	case "s3":
		b, err = openS3(ctx, u)
	default:
		return nil, fmt.Errorf("cold: store url %s: scheme must be file or s3", redact(u))
	}
	if err != nil {
		return nil, fmt.Errorf("cold: open %s: %w", redact(u), err)
	}
	return &blobStore{b: b}, nil
}

// openS3 builds the S3 client itself (rather than blob.OpenBucket's URL
// opener) so that static credentials can come from the URL, as a config file
// for an on-premises Ceph or MinIO usually provides them.
func openS3(ctx context.Context, u *url.URL) (*blob.Bucket, error) {
	q := u.Query()
	take := func(k string) string { v := q.Get(k); q.Del(k); return v }
	key, secret := take("access_key_id"), take("secret_access_key")
	var pathStyle, noHTTPS bool
	for k, dst := range map[string]*bool{"use_path_style": &pathStyle, "disable_https": &noHTTPS} {
		if v := take(k); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return nil, fmt.Errorf("%s=%q: %w", k, v, err)
			}
			*dst = b
		}
	}
	if q.Get("region") == "" {
		// The SDK refuses to sign without a region; S3-compatible servers
		// ignore it.
		q.Set("region", "us-east-1")
	}
	cfg, err := gcaws.V2ConfigFromURLParams(ctx, q)
	if err != nil {
		return nil, err
	}
	if key != "" || secret != "" {
		cfg.Credentials = aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider(key, secret, ""))
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.UsePathStyle = pathStyle
		o.EndpointOptions.DisableHTTPS = noHTTPS
	})
	return s3blob.OpenBucket(ctx, client, u.Host, &s3blob.Options{RequestChecksumCalculation: cfg.RequestChecksumCalculation})
}

// redact hides the secret key of a store URL in messages.
func redact(u *url.URL) string {
	c := *u
	q := c.Query()
	if q.Has("secret_access_key") {
		q.Set("secret_access_key", "xxxxx")
		c.RawQuery = q.Encode()
	}
	return c.Redacted()
}

type blobStore struct{ b *blob.Bucket }

func (s *blobStore) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	sum := sha256.Sum256(data)
	digest := hex.EncodeToString(sum[:])
	// Look first: most reruns find the object, and a store that ignored
	// If-None-Match would otherwise overwrite it.
	if err := s.sameAs(ctx, key, digest); !errors.Is(err, ErrNotFound) {
		return err
	}
	err := s.b.WriteAll(ctx, key, data, &blob.WriterOptions{
		IfNotExist:  true,
		ContentType: contentType(key),
		Metadata:    map[string]string{digestKey: digest},
	})
	if gcerrors.Code(err) == gcerrors.FailedPrecondition {
		// Lost a race with another writer of the same key.
		return s.sameAs(ctx, key, digest)
	}
	if err != nil {
		return fmt.Errorf("cold: put %s: %w", key, err)
	}
	return nil
}

// contentType: data files are Parquet; the archiver's catalog objects
// (package archive) are JSON.
func contentType(key string) string {
	if strings.HasSuffix(key, ".json") {
		return "application/json"
	}
	return "application/vnd.apache.parquet"
}

// sameAs returns nil if key holds an object whose digest is digest,
// ErrNotFound if there is none, ErrConflict otherwise.
func (s *blobStore) sameAs(ctx context.Context, key, digest string) error {
	a, err := s.b.Attributes(ctx, key)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	if err != nil {
		return fmt.Errorf("cold: stat %s: %w", key, err)
	}
	if a.Metadata[digestKey] != digest {
		return fmt.Errorf("%w: %s (sha256 %q, want %s)", ErrConflict, key, a.Metadata[digestKey], digest)
	}
	return nil
}

func (s *blobStore) ReadRange(ctx context.Context, key string, off, length int64) ([]byte, error) {
	r, err := s.b.NewRangeReader(ctx, key, off, length, nil)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	if err != nil {
		return nil, fmt.Errorf("cold: read %s@%d+%d: %w", key, off, length, err)
	}
	defer r.Close()
	// length can run past the end of the object (a footer guess); the
	// reader then returns fewer bytes.
	buf := make([]byte, min(length, max(r.Size()-off, 0)))
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, fmt.Errorf("cold: read %s@%d+%d: %w", key, off, length, err)
	}
	return buf, nil
}

func (s *blobStore) Size(ctx context.Context, key string) (int64, error) {
	a, err := s.b.Attributes(ctx, key)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return 0, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	if err != nil {
		return 0, fmt.Errorf("cold: stat %s: %w", key, err)
	}
	return a.Size, nil
}

func (s *blobStore) List(ctx context.Context, prefix string, fn func(key string) error) error {
	it := s.b.List(&blob.ListOptions{Prefix: prefix})
	for {
		o, err := it.Next(ctx)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("cold: list %s: %w", prefix, err)
		}
		if o.IsDir {
			continue
		}
		if err := fn(o.Key); err != nil {
			return err
		}
	}
}

func (s *blobStore) Delete(ctx context.Context, key string) error {
	err := s.b.Delete(ctx, key)
	if err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return fmt.Errorf("cold: delete %s: %w", key, err)
	}
	return nil
}

func (s *blobStore) Close() error { return s.b.Close() }
