package cold

import (
	"container/list"
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/parquet-go/parquet-go"
)

// openFile is a cold file whose footer and page index are in memory.
type openFile struct {
	key    string
	pf     *parquet.File
	tables Tables
	lay    layout
}

// fileCache keeps the most recently used open files. Cold files never
// change after they are written, so an entry never goes stale; a file
// removed from storage (retention) fails on its next page read and is
// dropped then.
type fileCache struct {
	mu    sync.Mutex
	max   int
	lru   *list.List // of *openFile, most recent first
	byKey map[string]*list.Element
}

func newFileCache(n int) *fileCache {
	return &fileCache{max: n, lru: list.New(), byKey: map[string]*list.Element{}}
}

func (c *fileCache) get(key string) *openFile {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[key]; ok {
		c.lru.MoveToFront(e)
		return e.Value.(*openFile)
	}
	return nil
}

func (c *fileCache) put(f *openFile) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byKey[f.key]; ok {
		return
	}
	c.byKey[f.key] = c.lru.PushFront(f)
	for c.lru.Len() > c.max {
		e := c.lru.Back()
		c.lru.Remove(e)
		delete(c.byKey, e.Value.(*openFile).key)
	}
}

// footerReadSize is the tail fetched to find the footer in one range read;
// a default part's footer and page index fit in it.
const footerReadSize = 64 << 10

// open returns key's open file, reading its footer and page index on the
// first use (two or three range reads).
func (r *Reader) open(ctx context.Context, key string) (*openFile, error) {
	if f := r.cache.get(key); f != nil {
		return f, nil
	}
	f, err := openObject(ctx, r.store, key)
	if err != nil {
		return nil, err
	}
	r.cache.put(f)
	return f, nil
}

func openObject(ctx context.Context, store Store, key string) (*openFile, error) {
	size, err := store.Size(ctx, key)
	if err != nil {
		return nil, err
	}
	ra := &storeReaderAt{ctx: ctx, store: store, key: key}
	return openParquet(key, ra, size)
}

func openParquet(key string, ra io.ReaderAt, size int64) (*openFile, error) {
	pf, err := parquet.OpenFile(ra, size,
		parquet.SkipMagicBytes(true), // the footer's magic is still checked
		parquet.OptimisticRead(true),
		parquet.ReadBufferSize(footerReadSize),
		parquet.SkipBloomFilters(true),
	)
	if err != nil {
		return nil, fmt.Errorf("cold: open %s: %w", key, err)
	}
	if v, _ := pf.Lookup(metaVersion); v != formatVersion {
		return nil, fmt.Errorf("cold: %s: format version %q, this build reads %q", key, v, formatVersion)
	}
	js, _ := pf.Lookup(metaColumns)
	t, err := unmarshalTables(js)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, key)
	}
	lay, err := newLayout(pf.Schema(), t)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, key)
	}
	return &openFile{key: key, pf: pf, tables: t, lay: lay}, nil
}

// storeReaderAt turns ReadAt into range reads under ctx; used only while a
// file is opened (page data goes through spanReader).
type storeReaderAt struct {
	ctx   context.Context
	store Store
	key   string
}

func (s *storeReaderAt) ReadAt(p []byte, off int64) (int, error) {
	b, err := s.store.ReadRange(s.ctx, s.key, off, int64(len(p)))
	n := copy(p, b)
	if err == nil && n < len(p) {
		err = io.EOF
	}
	return n, err
}
