/* Build-ids of loaded modules, read from their mapped notes (buildid.h). */
#define _GNU_SOURCE
#include "util/buildid.h"

#include <elf.h>
#include <errno.h>
#include <string.h>

void gmt__build_id_set(struct gmt__build_id *id, const uint8_t *bytes, size_t n)
{
	id->len = n > UINT16_MAX ? UINT16_MAX : (uint16_t)n;
	memcpy(id->bytes, bytes, n < GMT_BUILD_ID_MAX ? n : GMT_BUILD_ID_MAX);
}

/* Whether [vaddr, vaddr + size) lies in a readable PT_LOAD's file-backed
 * bytes: mapped, and holding what the file holds. */
static bool mapped(const struct dl_phdr_info *info, ElfW(Addr) vaddr, ElfW(Xword) size)
{
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_R) && vaddr >= ph->p_vaddr &&
		    size <= ph->p_filesz && vaddr - ph->p_vaddr <= ph->p_filesz - size)
			return true;
	}
	return false;
}

/* The build-id note among the notes at p[0..size), aligned to `align` (4, or
 * 8 for a segment of 8-byte notes); false when none is. */
static bool find_note(const uint8_t *p, ElfW(Xword) size, ElfW(Xword) align, struct gmt__build_id *id)
{
	ElfW(Xword) at = 0;

	while (size - at >= sizeof(ElfW(Nhdr))) {
		ElfW(Nhdr) nh;
		ElfW(Xword) name, desc;

		memcpy(&nh, p + at, sizeof(nh));
		at += sizeof(nh);
		name = ((ElfW(Xword))nh.n_namesz + align - 1) & ~(align - 1);
		desc = ((ElfW(Xword))nh.n_descsz + align - 1) & ~(align - 1);
		if (name > size - at || desc > size - at - name)
			return false; /* a note past the segment: not one to trust */
		if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 && memcmp(p + at, "GNU", 4) == 0) {
			gmt__build_id_set(id, p + at + name, nh.n_descsz);
			return true;
		}
		at += name + desc;
	}
	return false;
}

void gmt__build_id_mapped(const struct dl_phdr_info *info, struct gmt__build_id *id)
{
	id->len = 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

		if (ph->p_type != PT_NOTE || !mapped(info, ph->p_vaddr, ph->p_memsz))
			continue;
		if (find_note((const uint8_t *)(info->dlpi_addr + ph->p_vaddr), ph->p_memsz,
			      ph->p_align == 8 ? 8 : 4, id))
			return;
	}
}

struct at {
	uintptr_t addr;
	struct gmt__build_id *id;
	bool found;
};

static int at_one(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct at *a = arg;

	(void)size;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr;

		if (ph->p_type == PT_LOAD && a->addr >= lo && a->addr - lo < ph->p_memsz) {
			gmt__build_id_mapped(info, a->id);
			a->found = true;
			return 1;
		}
	}
	return 0;
}

bool gmt__build_id_at(uintptr_t addr, struct gmt__build_id *id)
{
	struct at a = { .addr = addr, .id = id };

	id->len = 0;
	dl_iterate_phdr(at_one, &a);
	return a.found;
}

bool gmt__build_id_equal(const struct gmt__build_id *a, const struct gmt__build_id *b)
{
	return a->len == b->len && memcmp(a->bytes, b->bytes, a->len < GMT_BUILD_ID_MAX ? a->len : GMT_BUILD_ID_MAX) == 0;
}

int gmt__build_id_hex(const struct gmt__build_id *id, char *hex, size_t len)
{
	static const char digits[] = "0123456789abcdef";
	size_t n = id->len < GMT_BUILD_ID_MAX ? id->len : GMT_BUILD_ID_MAX;

	if (hex != NULL && len > 0)
		hex[0] = '\0';
	if (id->len == 0)
		return -ENOENT;
	if (hex == NULL || len < 2 * n + 1)
		return -ENAMETOOLONG;
	for (size_t i = 0; i < n; i++) {
		hex[2 * i] = digits[id->bytes[i] >> 4];
		hex[2 * i + 1] = digits[id->bytes[i] & 15];
	}
	hex[2 * n] = '\0';
	return 0;
}
