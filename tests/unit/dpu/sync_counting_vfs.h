// SQLite's default VFS wrapped so a test can count the fsyncs (xSync) a
// store makes: what the agent's loop would wait for on a busy disk. Installed
// as the default VFS once per process, before a Store opens its database.
#pragma once

#include <sqlite3.h>

#include <atomic>
#include <cstdint>

namespace tandem::test {

class SyncCountingVfs {
 public:
  static SyncCountingVfs& install() {
    static SyncCountingVfs v;
    return v;
  }
  uint64_t syncs() const noexcept { return syncs_.load(); }

 private:
  struct File {
    sqlite3_file base;
    sqlite3_file* real;  // the default VFS's file, right after this struct
  };
  static File* as(sqlite3_file* f) { return reinterpret_cast<File*>(f); }
  static const sqlite3_io_methods* real_io(sqlite3_file* f) { return as(f)->real->pMethods; }

  SyncCountingVfs() {
    base_ = sqlite3_vfs_find(nullptr);
    vfs_ = *base_;
    vfs_.zName = "tandem-sync-counting";
    vfs_.szOsFile = static_cast<int>(sizeof(File)) + base_->szOsFile;
    vfs_.xOpen = &open;
    io_.iVersion = 3;
    io_.xClose = [](sqlite3_file* f) {
      const int rc = real_io(f)->xClose(as(f)->real);
      f->pMethods = nullptr;
      return rc;
    };
    io_.xRead = [](sqlite3_file* f, void* b, int n, sqlite3_int64 o) { return real_io(f)->xRead(as(f)->real, b, n, o); };
    io_.xWrite = [](sqlite3_file* f, const void* b, int n, sqlite3_int64 o) {
      return real_io(f)->xWrite(as(f)->real, b, n, o);
    };
    io_.xTruncate = [](sqlite3_file* f, sqlite3_int64 n) { return real_io(f)->xTruncate(as(f)->real, n); };
    io_.xSync = [](sqlite3_file* f, int flags) {
      ++install().syncs_;
      return real_io(f)->xSync(as(f)->real, flags);
    };
    io_.xFileSize = [](sqlite3_file* f, sqlite3_int64* n) { return real_io(f)->xFileSize(as(f)->real, n); };
    io_.xLock = [](sqlite3_file* f, int l) { return real_io(f)->xLock(as(f)->real, l); };
    io_.xUnlock = [](sqlite3_file* f, int l) { return real_io(f)->xUnlock(as(f)->real, l); };
    io_.xCheckReservedLock = [](sqlite3_file* f, int* r) { return real_io(f)->xCheckReservedLock(as(f)->real, r); };
    io_.xFileControl = [](sqlite3_file* f, int op, void* a) { return real_io(f)->xFileControl(as(f)->real, op, a); };
    io_.xSectorSize = [](sqlite3_file* f) { return real_io(f)->xSectorSize(as(f)->real); };
    io_.xDeviceCharacteristics = [](sqlite3_file* f) { return real_io(f)->xDeviceCharacteristics(as(f)->real); };
    io_.xShmMap = [](sqlite3_file* f, int i, int sz, int ext, void volatile** p) {
      return real_io(f)->xShmMap(as(f)->real, i, sz, ext, p);
    };
    io_.xShmLock = [](sqlite3_file* f, int o, int n, int fl) { return real_io(f)->xShmLock(as(f)->real, o, n, fl); };
    io_.xShmBarrier = [](sqlite3_file* f) { real_io(f)->xShmBarrier(as(f)->real); };
    io_.xShmUnmap = [](sqlite3_file* f, int d) { return real_io(f)->xShmUnmap(as(f)->real, d); };
    io_.xFetch = [](sqlite3_file* f, sqlite3_int64 o, int n, void** p) { return real_io(f)->xFetch(as(f)->real, o, n, p); };
    io_.xUnfetch = [](sqlite3_file* f, sqlite3_int64 o, void* p) { return real_io(f)->xUnfetch(as(f)->real, o, p); };
    sqlite3_vfs_register(&vfs_, 1);
  }
  static int open(sqlite3_vfs*, sqlite3_filename name, sqlite3_file* f, int flags, int* out) {
    SyncCountingVfs& v = install();
    File* w = as(f);
    w->real = reinterpret_cast<sqlite3_file*>(w + 1);
    w->real->pMethods = nullptr;
    const int rc = v.base_->xOpen(v.base_, name, w->real, flags, out);
    w->base.pMethods = w->real->pMethods ? &v.io_ : nullptr;
    return rc;
  }

  sqlite3_vfs* base_ = nullptr;
  sqlite3_vfs vfs_{};
  sqlite3_io_methods io_{};
  std::atomic<uint64_t> syncs_{0};
};

}  // namespace tandem::test
