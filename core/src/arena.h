/*
 * Arenas: the one block of memory a run of a plan works in, and the pool that lets
 * concurrent runs of the same plan each take their own.
 *
 * Blocks are 64-byte aligned (GE_ARENA_ALIGNMENT, the planner's placement unit) so that
 * any tensor the planner places at an aligned offset is aligned for any vector load.
 * The pool is a mutex-protected free list; a run takes an item, or makes a new one when
 * the list is empty, and gives it back when done, so the number of items in the pool is
 * the largest number of runs that were ever in flight at once.
 */
#ifndef GE_HUB_ARENA_H
#define GE_HUB_ARENA_H

#include <pthread.h>
#include <stddef.h>

#define GE_ARENA_ALIGNMENT 64

/* At least max(bytes, 1) bytes, GE_ARENA_ALIGNMENT-aligned, never NULL unless out of
 * memory; release with ge_arena_free. */
void *ge_arena_alloc(size_t bytes);
void ge_arena_free(void *block);

/* The link an item embeds (as its first member) to live in a ge_free_list. */
typedef struct ge_free_item {
    struct ge_free_item *next;
} ge_free_item;

typedef struct {
    pthread_mutex_t mutex;
    ge_free_item *head;
} ge_free_list;

void ge_free_list_init(ge_free_list *list);
/* An item given back earlier, or NULL when there is none. */
ge_free_item *ge_free_list_take(ge_free_list *list);
void ge_free_list_give(ge_free_list *list, ge_free_item *item);
/* Empties the list and returns its items (linked by `next`), for freeing. */
ge_free_item *ge_free_list_drain(ge_free_list *list);
void ge_free_list_destroy(ge_free_list *list);

#endif /* GE_HUB_ARENA_H */
