ALTER TABLE `reservations` ADD `instance_id` text;--> statement-breakpoint
ALTER TABLE `reservations` ADD `expires_at` integer;