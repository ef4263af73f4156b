/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The C shim of vhost-net-rs: only what Rust cannot reach. Its Rust mirror
 * is the one extern "C" block in shim.rs; keep the two in step.
 *
 * - A ring index must be one 16-bit load or store (the Rust uaccess API
 *   copies bytes, which may tear it across a 256 boundary): the user-access
 *   scopes and unsafe_get_user()/unsafe_put_user() are macros.
 * - iov_iter_ubuf() is inline: one-buffer messages to tun.
 * - set_current_state(), __set_current_state(), cond_resched() and
 *   TASK_SIZE_MAX are macros.
 * - struct xdp_buff and struct tun_msg_ctl have no Rust bindings, and the
 *   helpers that fill them are inline: TX batching into tun (TUN_MSG_PTR),
 *   as drivers/vhost/net.c does it.
 * - ptr_ring's batched consume and unconsume are inline, and only
 *   if_tun.h's inlines tell a queued skb from a tagged xdp_frame: RX
 *   batching from tun's ring, as drivers/vhost/net.c's vhost_net_buf does.
 */
#ifndef VNR_SHIM_H
#define VNR_SHIM_H

#include <linux/types.h>
#include <linux/compiler_types.h>

struct file;
struct iov_iter;
struct socket;
struct ptr_ring;
struct xdp_buff;

void vnr_announce(bool with_drop_in);
/* The module's parameters, as the shim declares them (struct Params in shim.rs). */
struct vnr_params {
	unsigned int drop_in;
	unsigned int max_mem_regions;
	unsigned int max_iotlb_entries;
	unsigned int workers;
};

void vnr_params(struct vnr_params *p);
void vnr_set_params(const struct vnr_params *p);
void vnr_warn_queue_stopped(int pid, unsigned int vq, const char *reason, int len);

int vnr_get_user_u16(const u16 __user *uaddr, u16 *val);
int vnr_get_user_u32(const u32 __user *uaddr, u32 *val);
int vnr_put_user_u16(u16 __user *uaddr, u16 val);
int vnr_put_user_u64(u64 __user *uaddr, u64 val);
int vnr_read_user_16(const void __user *uaddr, u8 *dst);
int vnr_read_user_16_acquire(const void __user *uaddr, u8 *dst);
unsigned long vnr_copy_from_user(void *dst, const void __user *src, unsigned long n);
/* One store of vnr_put_user_u64_each: `bytes`, in memory order, at byte
 * `offset` of the area. Rust's `vring::Store8` has this layout. */
struct vnr_store8 {
	u32 offset;
	u8 bytes[8];
};

int vnr_put_user_u64_each(void __user *uaddr, size_t len, const struct vnr_store8 *stores,
			  unsigned int n);
int vnr_put_user_u64_spaced(void __user *uaddr, size_t spacing, const u64 *vals, unsigned int n);

/* A message iterator over one user buffer (iov_iter_ubuf() is inline). */
void vnr_iov_iter_ubuf(struct iov_iter *iter, unsigned int direction, void __user *buf, size_t count);

void vnr_set_current_running(void);
void vnr_set_current_interruptible(void);
void vnr_cond_resched(void);
bool vnr_busy_poll_should_stop(void);
u64 vnr_task_size_max(void);

size_t vnr_xdp_buff_size(void);
unsigned int vnr_xdp_shinfo_size(void);
unsigned int vnr_xdp_rx_pad(void);
unsigned int vnr_sock_xdp_headroom(struct socket *sock);
void vnr_xdp_prepare(struct xdp_buff *xdp, void *buf, unsigned int buflen, unsigned int pad,
		     unsigned int datalen);
void *vnr_xdp_data(struct xdp_buff *xdp);
bool vnr_sock_can_batch(struct socket *sock);
int vnr_tun_send_batch(struct socket *sock, struct xdp_buff *xdp, unsigned int n);

/* Tap (tun) and macvtap backends; anything else is ERR_PTR / NULL. */
struct socket *vnr_backend_socket(struct file *file);
struct ptr_ring *vnr_backend_rx_ring(struct file *file);
int vnr_rx_ring_consume(struct file *file, struct ptr_ring *ring, void **q, int n);
void vnr_rx_ring_unconsume(struct ptr_ring *ring, void **q, int n);
int vnr_rx_ptr_len(void *ptr);

#endif
