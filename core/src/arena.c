/* Aligned arena blocks and the free list that pools them across runs (see arena.h). */
#include "arena.h"

#include <stdlib.h>

void *ge_arena_alloc(size_t bytes) {
    /* aligned_alloc wants a multiple of the alignment; round up, refusing overflow. */
    size_t rounded = bytes == 0 ? GE_ARENA_ALIGNMENT : bytes;
    if (rounded > (size_t)-1 - GE_ARENA_ALIGNMENT) {
        return NULL;
    }
    rounded = (rounded + GE_ARENA_ALIGNMENT - 1) / GE_ARENA_ALIGNMENT * GE_ARENA_ALIGNMENT;
    return aligned_alloc(GE_ARENA_ALIGNMENT, rounded);
}

void ge_arena_free(void *block) {
    free(block);
}

void ge_free_list_init(ge_free_list *list) {
    pthread_mutex_init(&list->mutex, NULL);
    list->head = NULL;
}

ge_free_item *ge_free_list_take(ge_free_list *list) {
    pthread_mutex_lock(&list->mutex);
    ge_free_item *item = list->head;
    if (item != NULL) {
        list->head = item->next;
        item->next = NULL;
    }
    pthread_mutex_unlock(&list->mutex);
    return item;
}

void ge_free_list_give(ge_free_list *list, ge_free_item *item) {
    pthread_mutex_lock(&list->mutex);
    item->next = list->head;
    list->head = item;
    pthread_mutex_unlock(&list->mutex);
}

ge_free_item *ge_free_list_drain(ge_free_list *list) {
    pthread_mutex_lock(&list->mutex);
    ge_free_item *items = list->head;
    list->head = NULL;
    pthread_mutex_unlock(&list->mutex);
    return items;
}

void ge_free_list_destroy(ge_free_list *list) {
    pthread_mutex_destroy(&list->mutex);
}
