package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/portcullis/portcullis/kv/pebble"
)

// A full disk under store.dir (and nats.store_dir, embedded). Pebble does
// not come back from a write its disk refused: a failed write to its log
// is fatal to the store (the processor then stops), and a flush that
// cannot write is retried at once, again and again, while writes wait.
// So the processor keeps a reserve: while a store's disk has less than
// DiskReserve free it is unready, naming the directory, and its stages
// take no new input (in-flight work finishes within the reserve); once
// there is room again they carry on by themselves. It refuses to start
// on a disk already below the reserve, saying so, rather than hang in
// Pebble's open (which replays its log into a flush it cannot write). A
// disk that fills at once still fails whatever is writing then: the
// embedded server's streams (watchEmbedded restarts the server once
// there is room), or Pebble's log (the processor stops; a supervisor
// starts it again, and it refuses to start until there is room).

// DiskReserve is the free space the processor keeps on the disk of
// store.dir and, embedded, of nats.store_dir: room for Pebble to switch
// to a new log (preallocated at 1.1 memtables) and to flush a full
// memtable, with a margin.
const DiskReserve = 3 * pebble.MemTableSize

// diskWatch is how often the disks' free space is read.
const diskWatch = 250 * time.Millisecond

// storeDirs are the directories on disks the processor writes, by their
// configuration key.
func (p *Processor) storeDirs() [][2]string {
	dirs := [][2]string{{"store.dir", p.cfg.Store.Dir}}
	if p.cfg.NATS.Embedded {
		dirs = append(dirs, [2]string{"nats.store_dir", p.cfg.NATS.StoreDir})
	}
	return dirs
}

// lowDisk returns the configuration key of the first store directory
// whose disk has less than DiskReserve free ("" when all have room), and
// the bytes free there. A disk whose free space cannot be read counts as
// having room: only a known shortage stops the stages.
func (p *Processor) lowDisk() (key string, free int64) {
	for _, d := range p.storeDirs() {
		f, err := freeSpace(existing(d[1]))
		if err == nil && f < DiskReserve {
			return d[0], f
		}
	}
	return "", 0
}

// existing is dir or its nearest ancestor that exists (a store directory
// is made at the first start).
func existing(dir string) string {
	for {
		if _, err := os.Stat(dir); err == nil || !errors.Is(err, os.ErrNotExist) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return dir
		}
		dir = parent
	}
}

// checkRoom refuses a start on a disk below the reserve.
func (p *Processor) checkRoom() error {
	if key, free := p.lowDisk(); key != "" {
		return fmt.Errorf("engine: %s has %d MiB free on its disk; the processor needs %d MiB there to work: free some space and start it again",
			key, free>>20, DiskReserve>>20)
	}
	return nil
}

// watchDisks marks the processor short of disk (health.lowDisk: readiness,
// Room) while a store's disk is below the reserve.
func (p *Processor) watchDisks(ctx context.Context) {
	every(ctx, diskWatch, func() bool {
		key, free := p.lowDisk()
		was := p.health.lowDisk.Swap(key)
		switch {
		case key != "" && was == "":
			p.log.Warn("disk nearly full: stages take no new input until there is room again", "dir", key, "free_mib", free>>20, "reserve_mib", DiskReserve>>20)
		case key == "" && was != "":
			p.log.Info("disk has room again: stages take input", "dir", was)
		}
		return true
	})
}

// room is stages.Deps.Room: every store's disk has room.
func (p *Processor) room() bool { return p.health.lowDisk.Load() == "" }
